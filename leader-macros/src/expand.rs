//! Code generation: the gated function.
//!
//! The signature stays as written except the return type `T`, which becomes
//! `::core::option::Option<T>`; the body moves into a closure (sync) or an
//! `async move` block (async) handed to `__private::gate_sync` / `gate_async`,
//! next to one `static` call site. Everything else lives in the runtime.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::{self, VisitMut};
use syn::{ReturnType, Token, Type};

use crate::parse::{self, Args, Input};

/// Expand `#[leader_only(args)]` on `item`. On error: the item unchanged, plus the errors.
pub(crate) fn leader_only(args: TokenStream, item: TokenStream) -> TokenStream {
    match parse::parse(args, item.clone()) {
        Ok(input) => expand(input),
        Err(error) => {
            let error = error.into_compile_error();
            quote!(#item #error)
        }
    }
}

fn expand(Input { args, mut func }: Input) -> TokenStream {
    let Args {
        group,
        cancel_on_loss,
        krate,
    } = args;
    let (ret, ret_span): (Type, _) = match &func.sig.output {
        ReturnType::Default => (syn::parse_quote!(()), func.sig.ident.span()),
        ReturnType::Type(_, ty) => ((**ty).clone(), ty.span()),
    };
    let is_unit = matches!(&ret, Type::Tuple(tuple) if tuple.elems.is_empty());
    let (erased, names_impl_trait) = erase_impl_trait(&ret);
    let body = &func.block;
    // The async block takes the statements, not the block: `async move { { x } }`
    // would trip `unused_braces` on the user's braces.
    let stmts = &body.stmts;

    let gated = if func.sig.asyncness.is_some() {
        // An async block's output type is inferred from its body, which would
        // leave coercions in the body (`Box::new(x)` to `Box<dyn Error>`)
        // without a target. A first, never-taken `return` of a `T` fixes the
        // output type before the body is checked (tracing's `#[instrument]`).
        let fake_return = (!is_unit && !matches!(erased, Type::Infer(_))).then(|| {
            quote_spanned! {ret_span=>
                #[allow(
                    unknown_lints,
                    unreachable_code,
                    clippy::diverging_sub_expression,
                    clippy::empty_loop,
                    clippy::let_with_type_underscore,
                    clippy::needless_return
                )]
                if false {
                    let __leader_fake_return: #erased = loop {};
                    return __leader_fake_return;
                }
            }
        });
        quote! {
            #krate::__private::gate_async(&__LEADER_SITE, #cancel_on_loss, async move {
                #fake_return
                #(#stmts)*
            })
            .await
        }
    } else if is_unit || names_impl_trait {
        quote!(#krate::__private::gate_sync(&__LEADER_SITE, move || #body))
    } else {
        quote!(#krate::__private::gate_sync(&__LEADER_SITE, move || -> #ret #body))
    };

    func.sig.output = syn::parse_quote_spanned!(ret_span=> -> ::core::option::Option<#ret>);
    func.block = syn::parse_quote!({
        static __LEADER_SITE: #krate::__private::CallSite = #krate::__private::CallSite::new(#group);
        #gated
    });
    func.into_token_stream()
}

/// `ty` with each `impl Trait` replaced by `_`, and whether there was any.
fn erase_impl_trait(ty: &Type) -> (Type, bool) {
    struct Erase(bool);
    impl VisitMut for Erase {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(impl_trait) = ty {
                *ty = Type::Infer(syn::TypeInfer {
                    underscore_token: Token![_](impl_trait.impl_token.span),
                });
                self.0 = true;
            } else {
                visit_mut::visit_type_mut(self, ty);
            }
        }
    }
    let mut erased = ty.clone();
    let mut erase = Erase(false);
    erase.visit_type_mut(&mut erased);
    (erased, erase.0)
}
