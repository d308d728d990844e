//! Code generation: the gated function.
//!
//! The signature stays as written except the return type `T`, which becomes
//! `Option<T>` (unless `default` keeps it); the body moves into a closure
//! (sync), an `async move` block (async) or a closure whose future is gated
//! (a sync fn returning a future), handed to `__private::gate_sync`,
//! `gate_async` or `gate_future` with the call site, a `static` in a block
//! of its own. Everything else lives in the runtime.
//!
//! Every path goes through the runtime's `__private`, never `::core` or
//! `::std`, which in edition 2015 are paths in the user's crate:
//!
//! ```edition2015
//! extern crate leader_runtime;
//! use leader_runtime::leader_only;
//!
//! #[leader_only(group = "old")]
//! fn tick() -> u32 { 1 }
//!
//! #[leader_only(group = "old", default = 0)]
//! fn tock() -> u32 { 1 }
//!
//! fn main() {
//!     let _: Option<u32> = tick();
//!     let _: u32 = tock();
//! }
//! ```

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::{self, VisitMut};
use syn::{AttrStyle, Attribute, ReturnType, Token, Type};

use crate::parse::{self, Args, Fallback, Input, Kind, Parsed};

/// Expand `#[leader_only(args)]` on `item`. On a mistake in the arguments
/// only: the gated function (with a placeholder for what was wrong) plus the
/// errors; on a function that can't be gated: the item unchanged plus the
/// errors.
pub(crate) fn leader_only(args: TokenStream, item: TokenStream) -> TokenStream {
    let Parsed { input, errors } = parse::parse(args, item.clone());
    let errors = errors.map(syn::Error::into_compile_error);
    match input {
        Some(input) => {
            let gated = expand(input);
            quote!(#gated #errors)
        }
        None => quote!(#item #errors),
    }
}

fn expand(Input { args, func, kind }: Input) -> TokenStream {
    let Args {
        group,
        cancel_on_loss,
        krate,
        default,
    } = args;
    let private = quote!(#krate::__private);
    let syn::ItemFn {
        attrs,
        vis,
        mut sig,
        block,
    } = func;
    // syn puts a body's inner attributes (`#![allow(..)]` at the top of the
    // body) into `attrs`; in front of the fn they are an error. They go back
    // to the top of the new body, where they still cover the user's body.
    let (inner_attrs, mut attrs): (Vec<Attribute>, Vec<Attribute>) = attrs
        .into_iter()
        .partition(|attr| matches!(attr.style, AttrStyle::Inner(_)));
    let (ret, ret_span): (Type, _) = match &sig.output {
        ReturnType::Default => (
            syn::parse_quote_spanned!(sig.paren_token.span.close()=> ()),
            sig.paren_token.span.close(),
        ),
        ReturnType::Type(_, ty) => ((**ty).clone(), ty.span()),
    };
    // Through the invisible group of a `macro_rules!` `$ret:ty` too.
    let is_unit = matches!(parse::unwrap_type(&ret), Type::Tuple(tuple) if tuple.elems.is_empty());
    let erased = erase_impl_trait(&ret);
    let infer = matches!(parse::unwrap_type(&erased), Type::Infer(_));
    // The call site: a `static` in a block of its own, out of the body's
    // namespace (a local or item of the same name in the user's code is theirs).
    let site = quote! {
        {
            static __LEADER_SITE: #private::CallSite = #private::CallSite::new(#group);
            &__LEADER_SITE
        }
    };
    // The body's braces keep their spans (the attribute's would garble
    // rustc's suggestions about the body).
    let braces = block.brace_token.span;
    let body = block.to_token_stream();

    // Statements ahead of the gated call in the new body.
    let mut prelude = None;
    let gated = match kind {
        Kind::Async => {
            // An async block's output type is inferred from its body, which would
            // leave coercions in the body (`Box::new(x)` to `Box<dyn Error>`)
            // without a target. A first, never-taken `return` of a `T` fixes the
            // output type before the body is checked (tracing's `#[instrument]`).
            // The `T` is named outside the async block, in a closure's return
            // type: an item the body declares (`struct Report;`) is in scope in
            // the whole async block, and would rename a `-> Report` named there.
            // (Nesting the body in a block of its own instead trips
            // `unused_braces` on a one-line body.)
            let fake_return = (!infer).then(|| {
                prelude = Some(quote_spanned! {ret_span=>
                    #[allow(unknown_lints, clippy::empty_loop, clippy::unused_unit)]
                    let __leader_output = || -> #erased { loop {} };
                });
                quote_spanned! {ret_span=>
                    #[allow(unknown_lints, unreachable_code, clippy::needless_return)]
                    if false {
                        return __leader_output();
                    }
                }
            });
            // The async block takes the statements, not the block: `async move { { x } }`
            // would trip `unused_braces` on the user's braces.
            let stmts = &block.stmts;
            let mut inner = Group::new(Delimiter::Brace, quote!(#fake_return #(#stmts)*));
            inner.set_span(braces.join());
            quote! {
                #private::gate_async(#site, #cancel_on_loss, async move #inner).await
            }
        }
        Kind::Sync => {
            let annotation = (!infer).then(|| quote!(-> #erased));
            quote!(#private::gate_sync(#site, move || #annotation #body))
        }
        Kind::Future { .. } => {
            let annotation = (!infer).then(|| quote!(-> #erased));
            quote!(#private::gate_future(#site, #cancel_on_loss, move || #annotation #body))
        }
    };

    let gated = match (&default, &kind) {
        (None, Kind::Future { boxed: true }) => quote!(#private::Box::pin(#gated)),
        (None, _) => gated,
        (Some(fallback), _) => {
            let fallback = match fallback {
                Fallback::Default(key) => {
                    // `T: Default` not satisfied: at the argument.
                    let at = Span::call_site().located_at(key.span());
                    let private = located_at(private.clone(), at);
                    quote_spanned!(at=> #private::Default::default())
                }
                Fallback::Expr(expr) => expr.to_token_stream(),
            };
            let (gated, wrap) = match kind {
                Kind::Future { boxed } => (quote!(#gated.await), Some(boxed)),
                _ => (gated, None),
            };
            let chosen = quote! {
                match #gated {
                    #private::Option::Some(__leader_value) => __leader_value,
                    #private::Option::None => #fallback,
                }
            };
            match wrap {
                None => chosen,
                Some(false) => quote!(async move { #chosen }),
                Some(true) => quote!(#private::Box::pin(async move { #chosen })),
            }
        }
    };

    if default.is_none() {
        // Not leading is `None`, and an unused `Option` is no warning: a
        // value the body returns (an error, say) would be dropped unseen.
        if !is_unit && !matches!(kind, Kind::Future { .. }) && !has_must_use(&attrs) {
            attrs.push(syn::parse_quote!(
                #[must_use = "`Some` holds what the body returned, `None` that this instance does not lead the group"]
            ));
        }
        // The type's own tokens keep their place; `Option<..>` around them
        // belongs to the expansion (no `clippy::option_option` on the user's
        // `-> Option<T>`).
        let at = Span::call_site().located_at(ret_span);
        let private = located_at(private.clone(), at);
        let option = |ty: &Type| -> Type { syn::parse_quote_spanned!(at=> #private::Option<#ty>) };
        let mut output = ret.clone();
        match parse::future_output_mut(&mut output) {
            // `impl Future<Output = Option<T>>`, `Pin<Box<dyn Future<Output = Option<T>>>>`
            Some((_, t)) if matches!(kind, Kind::Future { .. }) => *t = option(t),
            _ => output = option(&ret),
        }
        sig.output = syn::parse_quote_spanned!(at=> -> #output);
    }

    let mut block = Group::new(Delimiter::Brace, quote!(#(#inner_attrs)* #prelude #gated));
    block.set_span(braces.join());
    quote!(#(#attrs)* #vis #sig #block)
}

/// `tokens`, every one at `at`.
fn located_at(tokens: TokenStream, at: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut inner = Group::new(group.delimiter(), located_at(group.stream(), at));
                inner.set_span(at);
                token = TokenTree::Group(inner);
            } else {
                token.set_span(at);
            }
            token
        })
        .collect()
}

/// Whether the user wrote a `#[must_use]` of their own.
fn has_must_use(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| attr.path().is_ident("must_use"))
}

/// `ty` with each `impl Trait` replaced by `_`: a closure's return type
/// annotation, which can't name `impl Trait` but still gives coercions their
/// target.
fn erase_impl_trait(ty: &Type) -> Type {
    struct Erase;
    impl VisitMut for Erase {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(impl_trait) = ty {
                *ty = Type::Infer(syn::TypeInfer {
                    underscore_token: Token![_](impl_trait.impl_token.span),
                });
            } else {
                visit_mut::visit_type_mut(self, ty);
            }
        }
    }
    let mut erased = ty.clone();
    Erase.visit_type_mut(&mut erased);
    erased
}
