//! The attribute's arguments and the function it gates, parsed and validated.
//!
//! Every mistake becomes a `syn::Error` spanned at the offending token; all of
//! them are combined into one report so a user fixes them in one pass.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{
    token, Expr, ExprLit, GenericArgument, Item, ItemFn, Lit, LitStr, Path, PathArguments,
    ReturnType, Token, TraitBoundModifier, TraitItemFn, Type, TypeParamBound,
};

/// The group of `#[leader_only]` without a `group` argument.
const DEFAULT_GROUP: &str = "default";

/// The longest group name the runtime accepts, in bytes.
const GROUP_MAX_LEN: usize = 128;

/// The valid arguments, as listed in error messages.
const VALID_ARGS: &str =
    "`group = \"...\"`, `default`, `default = ...`, `cancel_on_loss` or `crate = \"...\"`";

/// A `#[leader_only(...)]` on a function it can gate.
pub(crate) struct Input {
    pub(crate) args: Args,
    pub(crate) func: ItemFn,
    pub(crate) kind: Kind,
}

/// What the attribute gates.
pub(crate) enum Kind {
    /// An `async fn`.
    Async,
    /// A sync fn that returns a future (`impl Future<Output = T>`, or
    /// `Pin<Box<dyn Future<Output = T> + ..>>` as `#[async_trait]` writes it):
    /// the future is gated, for its whole life.
    Future {
        /// `Pin<Box<dyn Future>>`, not `impl Future`.
        boxed: bool,
    },
    /// Any other sync fn.
    Sync,
}

/// The attribute's arguments.
pub(crate) struct Args {
    /// The lease group, validated; `"default"` when not given.
    pub(crate) group: LitStr,
    /// Stop the body and return `None` when leadership ends mid-run (async only).
    pub(crate) cancel_on_loss: bool,
    /// The path of the runtime crate; `::leader_runtime` when not given.
    pub(crate) krate: Path,
    /// What a call returns where the body does not run, if the signature is kept.
    pub(crate) default: Option<Fallback>,
}

/// The value of a gated call that did not run, with `default`.
pub(crate) enum Fallback {
    /// `default`: `T::default()`; the key, for its span.
    Default(Path),
    /// `default = expr`.
    Expr(Expr),
}

/// What [`parse`] found: the function to gate, if it can be gated, and every
/// mistake. With mistakes in the arguments only, the function is still
/// gated (a placeholder stands for an invalid argument), so that its callers
/// see the signature they expect and report nothing more.
pub(crate) struct Parsed {
    pub(crate) input: Option<Input>,
    pub(crate) errors: Option<syn::Error>,
}

/// Parse and validate the attribute's arguments and the item it is on.
pub(crate) fn parse(args: TokenStream, item: TokenStream) -> Parsed {
    let mut errors = Errors::default();
    let args = parse_args(args, &mut errors);
    let input = parse_fn(item, &mut errors).and_then(|(mut func, mut gatable)| {
        let kind = if func.sig.asyncness.is_some() {
            Kind::Async
        } else {
            match &func.sig.output {
                ReturnType::Type(_, ty) => match future_output(ty) {
                    Some(boxed) => Kind::Future { boxed },
                    None => Kind::Sync,
                },
                ReturnType::Default => Kind::Sync,
            }
        };
        let mut cancel_on_loss = args.cancel_on_loss.is_some();
        let hidden = match (&kind, &func.sig.output) {
            (Kind::Sync, ReturnType::Type(_, ty)) => hidden_future(ty),
            _ => None,
        };
        if let Some((hidden, name)) = hidden {
            // The function returns a future, just not in a form we see:
            // gated as a sync function, only the future's construction
            // would be, not its run. Refused, with or without
            // `cancel_on_loss`; emitted unchanged, so its callers report
            // nothing more.
            errors.push(syn::Error::new_spanned(
                &hidden,
                format!(
                    "`#[leader_only]` can't see the future in `{name}`, so it would gate only \
                     the future's construction, not its run: write the type out, \
                     `Pin<Box<dyn Future<Output = T> + Send + '_>>` or \
                     `impl Future<Output = T>`, or make the function `async`"
                ),
            ));
            cancel_on_loss = false;
            gatable = false;
        } else if let (Kind::Sync, Some(key)) = (&kind, &args.cancel_on_loss) {
            errors.push(syn::Error::new_spanned(
                key,
                "`cancel_on_loss` needs an `async fn`: a sync body can't be stopped mid-run",
            ));
            cancel_on_loss = false;
        }
        if let (Kind::Future { .. }, ReturnType::Type(_, ty)) = (&kind, &mut func.sig.output) {
            if let Some(unpin) = take_unpin(ty) {
                errors.push(syn::Error::new_spanned(
                    unpin,
                    "a gated future is not `Unpin` (it is an `async fn`'s, holding the body's \
                     future): remove `+ Unpin`, and pin the future where it is polled \
                     (`Box::pin(..)`, `std::pin::pin!(..)`)",
                ));
            }
        }
        if !matches!(kind, Kind::Async) {
            if let Some(attr) = func
                .attrs
                .iter()
                .find(|attr| attr.path().is_ident("track_caller"))
            {
                errors.push(syn::Error::new_spanned(
                    attr,
                    "`#[track_caller]` can't reach through `#[leader_only]` on a sync fn: the body runs in a closure; remove `#[track_caller]`",
                ));
            }
        }
        gatable.then_some(Input {
            args: Args {
                group: args
                    .group
                    .unwrap_or_else(|| LitStr::new(DEFAULT_GROUP, Span::call_site())),
                cancel_on_loss,
                krate: args
                    .krate
                    .unwrap_or_else(|| syn::parse_quote!(::leader_runtime)),
                default: args.default,
            },
            func,
            kind,
        })
    });
    Parsed {
        input,
        errors: errors.0,
    }
}

/// `ty` without the invisible groups a `macro_rules!` fragment puts around it
/// (a `$ret:ty` arrives as a `Type::Group`, so a type written `()` or `!` is
/// only seen through them), and without parentheses.
pub(crate) fn unwrap_type(mut ty: &Type) -> &Type {
    loop {
        match ty {
            Type::Group(group) => ty = &group.elem,
            Type::Paren(paren) => ty = &paren.elem,
            _ => return ty,
        }
    }
}

/// [`unwrap_type`], for changing the type.
fn unwrap_type_mut(mut ty: &mut Type) -> &mut Type {
    loop {
        match ty {
            Type::Group(group) => ty = &mut group.elem,
            Type::Paren(paren) => ty = &mut paren.elem,
            _ => return ty,
        }
    }
}

/// Whether `ty` is `Pin<Box<dyn Future<..>>>` (`Some(true)`) or
/// `impl Future<..>` (`Some(false)`); see [`future_output_mut`].
fn future_output(ty: &Type) -> Option<bool> {
    future_output_mut(&mut ty.clone()).map(|(boxed, _)| boxed)
}

/// If `ty` is `impl Future<Output = T>` (`boxed`: false) or
/// `Pin<Box<dyn Future<Output = T>>>` (`boxed`: true), plus any other
/// bounds: `boxed` and the `T`. Paths are recognised by their last segment.
pub(crate) fn future_output_mut(ty: &mut Type) -> Option<(bool, &mut Type)> {
    let (boxed, bounds) = bounds_mut(ty)?;
    future_bound(bounds).map(|t| (boxed, t))
}

/// The bounds of `impl ..` (`boxed`: false) or of the `dyn ..` in
/// `Pin<Box<dyn ..>>` (`boxed`: true).
fn bounds_mut(ty: &mut Type) -> Option<(bool, &mut Punctuated<TypeParamBound, Token![+]>)> {
    match unwrap_type_mut(ty) {
        Type::ImplTrait(impl_trait) => Some((false, &mut impl_trait.bounds)),
        Type::Path(pin) => {
            let boxed = single_type_arg(&mut pin.path, "Pin")?;
            let Type::Path(boxed) = unwrap_type_mut(boxed) else {
                return None;
            };
            let Type::TraitObject(object) =
                unwrap_type_mut(single_type_arg(&mut boxed.path, "Box")?)
            else {
                return None;
            };
            Some((true, &mut object.bounds))
        }
        _ => None,
    }
}

/// Remove an `Unpin` bound from a returned future's type, and return it. The
/// gated future (an `async fn`'s, holding the body's) is never `Unpin`, so
/// the bound can't be met; without it the function is still gated, and its
/// callers see the signature they expect.
fn take_unpin(ty: &mut Type) -> Option<TypeParamBound> {
    let (_, bounds) = bounds_mut(ty)?;
    let is_unpin = |bound: &TypeParamBound| {
        matches!(bound, TypeParamBound::Trait(bound)
            if matches!(bound.modifier, TraitBoundModifier::None)
                && bound.path.segments.last().is_some_and(|last| last.ident == "Unpin"))
    };
    let (unpin, kept): (Vec<_>, Vec<_>) = std::mem::take(bounds).into_iter().partition(is_unpin);
    *bounds = kept.into_iter().collect();
    unpin.into_iter().next()
}

/// For a return type not recognised as a future ([`future_output`]): the
/// future it still seems to be, by a last path segment ending in `Future`
/// — an alias (`BoxFuture<'_, T>`), `Box<dyn Future<..>>` without `Pin`,
/// `impl IntoFuture<..>` — as that segment (for the span) and the type in
/// short (for the message).
fn hidden_future(ty: &Type) -> Option<(syn::Ident, String)> {
    fn in_path(path: &Path) -> Option<(syn::Ident, String)> {
        let last = path.segments.last()?;
        if last.ident.to_string().ends_with("Future") {
            return Some((last.ident.clone(), last.ident.to_string()));
        }
        if last.ident != "Box" && last.ident != "Pin" {
            return None;
        }
        // `Box<..>`, `Pin<..>`: look at what they hold.
        let PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        let (ident, inner) = args.args.iter().find_map(|arg| match arg {
            GenericArgument::Type(ty) => hidden_future(ty),
            _ => None,
        })?;
        Some((ident, format!("{}<{inner}>", last.ident)))
    }
    let in_bounds = |bounds: &Punctuated<TypeParamBound, Token![+]>, prefix: &str| {
        bounds.iter().find_map(|bound| match bound {
            TypeParamBound::Trait(bound) => {
                in_path(&bound.path).map(|(ident, name)| (ident, format!("{prefix} {name}")))
            }
            _ => None,
        })
    };
    match unwrap_type(ty) {
        Type::Path(path) => in_path(&path.path),
        Type::ImplTrait(impl_trait) => in_bounds(&impl_trait.bounds, "impl"),
        Type::TraitObject(object) => in_bounds(&object.bounds, "dyn"),
        _ => None,
    }
}

/// The `T` of `Name<T>` when `path` ends in `Name` with one type argument.
fn single_type_arg<'a>(path: &'a mut Path, name: &str) -> Option<&'a mut Type> {
    let last = path.segments.last_mut().filter(|last| last.ident == name)?;
    let PathArguments::AngleBracketed(args) = &mut last.arguments else {
        return None;
    };
    let mut types = args.args.iter_mut().filter_map(|arg| match arg {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    });
    let ty = types.next()?;
    types.next().is_none().then_some(ty)
}

/// The `T` of the bound `Future<Output = T>` among `bounds`.
fn future_bound(bounds: &mut Punctuated<TypeParamBound, Token![+]>) -> Option<&mut Type> {
    bounds.iter_mut().find_map(|bound| {
        let TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        let last = bound.path.segments.last_mut()?;
        if last.ident != "Future" {
            return None;
        }
        let PathArguments::AngleBracketed(args) = &mut last.arguments else {
            return None;
        };
        args.args.iter_mut().find_map(|arg| match arg {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&mut assoc.ty),
            _ => None,
        })
    })
}

/// Several errors, reported together.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }
}

/// Arguments as written; `None` where absent or invalid (the error is reported).
#[derive(Default)]
struct RawArgs {
    group: Option<LitStr>,
    /// The `cancel_on_loss` key, kept for its span.
    cancel_on_loss: Option<Path>,
    krate: Option<Path>,
    default: Option<Fallback>,
}

fn parse_args(tokens: TokenStream, errors: &mut Errors) -> RawArgs {
    let mut args = RawArgs::default();
    if let Ok(lit) = syn::parse2::<LitStr>(tokens.clone()) {
        errors.push(syn::Error::new_spanned(
            &lit,
            format!(
                "the group is a named argument: `group = {}`",
                lit.to_token_stream()
            ),
        ));
        return args;
    }
    let mut seen: Vec<&'static str> = Vec::new();
    let parser = syn::meta::parser(|meta| {
        let key = ["group", "default", "cancel_on_loss", "crate"]
            .into_iter()
            .find(|key| meta.path.is_ident(key));
        let parenthesized = meta.input.peek(token::Paren);
        let value = take_value(&meta)?;
        let Some(key) = key else {
            errors.push(syn::Error::new_spanned(
                &meta.path,
                format!(
                    "unknown argument `{}`; expected {VALID_ARGS}",
                    path_to_string(&meta.path)
                ),
            ));
            return Ok(());
        };
        if seen.contains(&key) {
            errors.push(syn::Error::new_spanned(
                &meta.path,
                format!("duplicate argument `{key}`"),
            ));
            return Ok(());
        }
        seen.push(key);
        match key {
            "group" => match string_value(
                &meta,
                value,
                "`group` takes a string literal: `group = \"cleanup\"`",
            ) {
                Ok(lit) => match validate_group(&lit) {
                    Ok(()) => args.group = Some(lit),
                    Err(error) => errors.push(error),
                },
                Err(error) => errors.push(error),
            },
            "default" => match value {
                Some(expr) => args.default = Some(Fallback::Expr(expr)),
                None if !parenthesized => {
                    args.default = Some(Fallback::Default(meta.path.clone()));
                }
                // `default(..)`, consumed by `take_value`.
                None => errors.push(syn::Error::new_spanned(
                    &meta.path,
                    "`default` takes an expression or nothing: `default = Ok(0)` or `default`",
                )),
            },
            "cancel_on_loss" => match value {
                Some(value) => errors.push(syn::Error::new_spanned(
                    value,
                    "`cancel_on_loss` takes no value: write `cancel_on_loss`",
                )),
                None => args.cancel_on_loss = Some(meta.path.clone()),
            },
            _ => match string_value(
                &meta,
                value,
                "`crate` takes a path in a string: `crate = \"::leader_runtime\"`",
            )
            .and_then(|lit| parse_crate_path(&lit))
            {
                Ok(path) => args.krate = Some(path),
                Err(error) => errors.push(error),
            },
        }
        Ok(())
    });
    if let Err(error) = parser.parse2(tokens) {
        errors.push(error);
    }
    args
}

/// Consume the value after a key: `= expr` (returned), `(...)` or nothing.
fn take_value(meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Expr>> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse().map(Some)
    } else {
        if meta.input.peek(token::Paren) {
            let _: TokenTree = meta.input.parse()?;
        }
        Ok(None)
    }
}

/// The string literal of `key = "..."`, or an error saying `expected` at the value (or the key when missing).
fn string_value(
    meta: &ParseNestedMeta<'_>,
    value: Option<Expr>,
    expected: &str,
) -> syn::Result<LitStr> {
    // A `macro_rules!` fragment (`$group:literal`, `$group:expr`) arrives in
    // an invisible group.
    let mut value = value;
    while let Some(Expr::Group(group)) = value {
        value = Some(*group.expr);
    }
    match value {
        Some(Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        })) => Ok(lit),
        Some(other) => Err(syn::Error::new_spanned(other, expected)),
        None => Err(syn::Error::new_spanned(&meta.path, expected)),
    }
}

fn validate_group(lit: &LitStr) -> syn::Result<()> {
    let name = lit.value();
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-');
    let problem = if name.is_empty() {
        "group name is empty: write e.g. `group = \"cleanup\"`".to_owned()
    } else if let Some(c) = name.chars().find(|&c| !allowed(c)) {
        format!("group name contains {c:?}; use only ASCII letters, digits, `.`, `_`, `:` and `-`")
    } else if name.len() > GROUP_MAX_LEN {
        format!(
            "group name is {} bytes long; the limit is {GROUP_MAX_LEN}",
            name.len()
        )
    } else {
        return Ok(());
    };
    Err(syn::Error::new_spanned(lit, problem))
}

fn parse_crate_path(lit: &LitStr) -> syn::Result<Path> {
    let error = || {
        syn::Error::new_spanned(
            lit,
            format!(
                "`crate` takes the path of the runtime crate, not {}: e.g. `crate = \"::leader_runtime\"`",
                lit.to_token_stream()
            ),
        )
    };
    lit.parse_with(Path::parse_mod_style).map_err(|_| error())
}

fn path_to_string(path: &Path) -> String {
    let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let leading = if path.leading_colon.is_some() {
        "::"
    } else {
        ""
    };
    format!("{leading}{}", segments.join("::"))
}

/// The function the attribute is on, if it is one, and whether it can gate
/// it; its problems go to `errors`.
fn parse_fn(tokens: TokenStream, errors: &mut Errors) -> Option<(ItemFn, bool)> {
    let item = match syn::parse2::<Item>(tokens.clone()) {
        Ok(Item::Fn(func)) => func,
        Ok(Item::Verbatim(_)) | Err(_) if syn::parse2::<TraitItemFn>(tokens.clone()).is_ok() => {
            // A function without a body: a trait method declaration or a foreign fn.
            let func = syn::parse2::<TraitItemFn>(tokens).ok()?;
            let at = func.semi_token.map_or_else(
                || func.sig.ident.to_token_stream(),
                |semi| semi.to_token_stream(),
            );
            errors.push(syn::Error::new_spanned(
                at,
                "`#[leader_only]` needs a function with a body: `fn name() { .. }`",
            ));
            return None;
        }
        Ok(other) => {
            let (what, at) = describe(&other);
            errors.push(syn::Error::new_spanned(
                at,
                format!("`#[leader_only]` goes on a `fn` or `async fn`, not on {what}"),
            ));
            return None;
        }
        Err(error) => {
            errors.push(error);
            return None;
        }
    };
    let sig = &item.sig;
    // Mistakes that leave nothing to gate: the function is emitted as written.
    let mut gatable = true;
    if let Some(constness) = &sig.constness {
        gatable = false;
        errors.push(syn::Error::new_spanned(
            constness,
            "`#[leader_only]` can't gate a `const fn`: remove `const`",
        ));
    }
    if let Some(abi) = &sig.abi {
        gatable = false;
        errors.push(syn::Error::new_spanned(
            abi,
            format!(
                "`#[leader_only]` gates Rust functions only: remove `{}`",
                abi.to_token_stream()
            ),
        ));
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        if let Type::Never(never) = unwrap_type(ty) {
            gatable = false;
            errors.push(syn::Error::new_spanned(
                never,
                "`#[leader_only]` can't gate a function returning `!`: a gated call returns `None` where it does not lead",
            ));
        }
    }
    if let Some(again) = item.attrs.iter().find(|attr| {
        attr.path()
            .segments
            .last()
            .is_some_and(|segment| segment.ident == "leader_only")
    }) {
        gatable = false;
        errors.push(syn::Error::new_spanned(
            again,
            "duplicate `#[leader_only]`: a function has one group; keep one attribute",
        ));
    }
    Some((item, gatable))
}

/// What the item is (for "not on a struct") and the tokens to point at.
fn describe(item: &Item) -> (&'static str, TokenStream) {
    fn two(a: &dyn ToTokens, b: &dyn ToTokens) -> TokenStream {
        let mut tokens = a.to_token_stream();
        b.to_tokens(&mut tokens);
        tokens
    }
    match item {
        Item::Const(i) => ("a const", two(&i.const_token, &i.ident)),
        Item::Enum(i) => ("an enum", two(&i.enum_token, &i.ident)),
        Item::ExternCrate(i) => ("an extern crate", two(&i.extern_token, &i.crate_token)),
        Item::ForeignMod(i) => ("an extern block", i.abi.to_token_stream()),
        Item::Impl(i) => ("an impl block", i.impl_token.to_token_stream()),
        Item::Macro(i) => ("a macro invocation", i.mac.path.to_token_stream()),
        Item::Mod(i) => ("a module", two(&i.mod_token, &i.ident)),
        Item::Static(i) => ("a static", two(&i.static_token, &i.ident)),
        Item::Struct(i) => ("a struct", two(&i.struct_token, &i.ident)),
        Item::Trait(i) => ("a trait", two(&i.trait_token, &i.ident)),
        Item::TraitAlias(i) => ("a trait alias", two(&i.trait_token, &i.ident)),
        Item::Type(i) => ("a type alias", two(&i.type_token, &i.ident)),
        Item::Union(i) => ("a union", two(&i.union_token, &i.ident)),
        Item::Use(i) => ("a use declaration", i.use_token.to_token_stream()),
        other => ("this item", other.to_token_stream()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn ok(args: TokenStream, item: TokenStream) -> Input {
        match parse(args, item) {
            Parsed {
                input: Some(input),
                errors: None,
            } => input,
            Parsed { errors, .. } => panic!("unexpected error: {errors:?}"),
        }
    }

    fn errors(args: TokenStream, item: TokenStream) -> Vec<String> {
        match parse(args, item).errors {
            None => panic!("expected an error"),
            Some(error) => error.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    fn error(args: TokenStream, item: TokenStream) -> String {
        let mut all = errors(args, item);
        assert_eq!(all.len(), 1, "expected one error: {all:?}");
        all.remove(0)
    }

    fn async_fn() -> TokenStream {
        quote!(
            async fn tick() {}
        )
    }

    fn sync_fn() -> TokenStream {
        quote!(
            fn tick() {}
        )
    }

    fn krate(input: &Input) -> String {
        input.args.krate.to_token_stream().to_string()
    }

    #[test]
    fn no_arguments_mean_the_default_group() {
        let input = ok(quote!(), async_fn());
        assert_eq!(input.args.group.value(), "default");
        assert!(!input.args.cancel_on_loss);
        assert_eq!(krate(&input), ":: leader_runtime");
        assert_eq!(input.func.sig.ident, "tick");
    }

    #[test]
    fn all_arguments_in_any_order_with_a_trailing_comma() {
        let input = ok(
            quote!(cancel_on_loss, crate = "::my_leader", group = "cleanup",),
            async_fn(),
        );
        assert_eq!(input.args.group.value(), "cleanup");
        assert!(input.args.cancel_on_loss);
        assert_eq!(krate(&input), ":: my_leader");
    }

    #[test]
    fn group_on_a_sync_fn() {
        let input = ok(quote!(group = "cleanup"), sync_fn());
        assert_eq!(input.args.group.value(), "cleanup");
        assert!(!input.args.cancel_on_loss);
    }

    #[test]
    fn group_takes_every_allowed_character_and_raw_strings() {
        let name = "Az09._:-";
        let input = ok(quote!(group = #name), sync_fn());
        assert_eq!(input.args.group.value(), name);
        let input = ok(quote!(group = r"jobs:reaper"), sync_fn());
        assert_eq!(input.args.group.value(), "jobs:reaper");
    }

    #[test]
    fn group_of_128_bytes_is_accepted() {
        let name = "g".repeat(128);
        assert_eq!(
            ok(quote!(group = #name), sync_fn()).args.group.value(),
            name
        );
    }

    #[test]
    fn crate_takes_relative_and_crate_paths() {
        assert_eq!(krate(&ok(quote!(crate = "leader"), sync_fn())), "leader");
        assert_eq!(
            krate(&ok(quote!(crate = "crate::deps::leader"), sync_fn())),
            "crate :: deps :: leader"
        );
    }

    #[test]
    fn methods_and_generics_parse() {
        let input = ok(
            quote!(),
            quote!(
                pub(crate) async fn run<T: Clone>(&mut self, x: impl Into<T>) -> T
                where
                    T: Send,
                {
                    x.into()
                }
            ),
        );
        assert!(input.func.sig.receiver().is_some());
        assert!(input.func.sig.generics.where_clause.is_some());
    }

    #[test]
    fn unknown_argument_lists_the_valid_ones() {
        assert_eq!(
            error(quote!(grop = "x"), sync_fn()),
            "unknown argument `grop`; expected `group = \"...\"`, `default`, `default = ...`, `cancel_on_loss` or `crate = \"...\"`"
        );
        assert!(error(quote!(a::b), sync_fn()).starts_with("unknown argument `a::b`;"));
        assert!(error(quote!(ttl(5)), sync_fn()).starts_with("unknown argument `ttl`;"));
    }

    #[test]
    fn duplicate_argument() {
        assert_eq!(
            error(quote!(group = "a", group = "b"), sync_fn()),
            "duplicate argument `group`"
        );
        assert_eq!(
            error(quote!(cancel_on_loss, cancel_on_loss), async_fn()),
            "duplicate argument `cancel_on_loss`"
        );
        assert_eq!(
            error(quote!(crate = "a", crate = "b"), sync_fn()),
            "duplicate argument `crate`"
        );
    }

    #[test]
    fn group_must_be_a_string_literal() {
        let expected = "`group` takes a string literal: `group = \"cleanup\"`";
        assert_eq!(error(quote!(group = cleanup), sync_fn()), expected);
        assert_eq!(error(quote!(group = 5), sync_fn()), expected);
        assert_eq!(
            error(quote!(group = concat!("a", "b")), sync_fn()),
            expected
        );
        assert_eq!(error(quote!(group), sync_fn()), expected);
        assert_eq!(error(quote!(group("x")), sync_fn()), expected);
    }

    #[test]
    fn group_as_a_positional_literal() {
        assert_eq!(
            error(quote!("cleanup"), sync_fn()),
            "the group is a named argument: `group = \"cleanup\"`"
        );
    }

    #[test]
    fn group_empty() {
        assert_eq!(
            error(quote!(group = ""), sync_fn()),
            "group name is empty: write e.g. `group = \"cleanup\"`"
        );
    }

    #[test]
    fn group_with_a_character_outside_the_set() {
        for (name, shown) in [
            ("a b", "' '"),
            ("{x}", "'{'"),
            ("café", "'é'"),
            ("a/b", "'/'"),
        ] {
            assert_eq!(
                error(quote!(group = #name), sync_fn()),
                format!("group name contains {shown}; use only ASCII letters, digits, `.`, `_`, `:` and `-`")
            );
        }
    }

    #[test]
    fn group_over_128_bytes() {
        let name = "g".repeat(129);
        assert_eq!(
            error(quote!(group = #name), sync_fn()),
            "group name is 129 bytes long; the limit is 128"
        );
    }

    #[test]
    fn cancel_on_loss_takes_no_value() {
        assert_eq!(
            error(quote!(cancel_on_loss = true), async_fn()),
            "`cancel_on_loss` takes no value: write `cancel_on_loss`"
        );
    }

    #[test]
    fn cancel_on_loss_on_a_sync_fn() {
        assert_eq!(
            error(quote!(cancel_on_loss), sync_fn()),
            "`cancel_on_loss` needs an `async fn`: a sync body can't be stopped mid-run"
        );
    }

    #[test]
    fn a_future_the_attribute_cannot_see_is_refused() {
        let tail = ", so it would gate only the future's construction, not its run: write the \
                    type out, `Pin<Box<dyn Future<Output = T> + Send + '_>>` or \
                    `impl Future<Output = T>`, or make the function `async`";
        for (item, name) in [
            (
                quote!(
                    fn job() -> BoxFuture<'static, u32> {
                        todo!()
                    }
                ),
                "BoxFuture",
            ),
            (
                quote!(
                    fn job() -> Box<dyn Future<Output = u32> + Unpin> {
                        todo!()
                    }
                ),
                "Box<dyn Future>",
            ),
            (
                quote!(
                    fn job() -> Pin<Box<dyn Future + Send>> {
                        todo!()
                    }
                ),
                "Pin<Box<dyn Future>>",
            ),
            (
                quote!(
                    fn job() -> impl IntoFuture<Output = u32> {
                        std::future::ready(1)
                    }
                ),
                "impl IntoFuture",
            ),
        ] {
            // With or without `cancel_on_loss`: one error, and the function
            // left as it was.
            for args in [quote!(), quote!(cancel_on_loss)] {
                let parsed = parse(args, item.clone());
                assert!(parsed.input.is_none());
                let errors: Vec<String> = parsed
                    .errors
                    .unwrap()
                    .into_iter()
                    .map(|e| e.to_string())
                    .collect();
                assert_eq!(
                    errors,
                    [format!(
                        "`#[leader_only]` can't see the future in `{name}`{tail}"
                    )]
                );
            }
        }
    }

    #[test]
    fn unpin_future_is_refused_and_still_gated_without_the_bound() {
        for item in [
            quote!(
                fn job() -> impl Future<Output = u32> + Unpin + Send {
                    std::future::ready(1)
                }
            ),
            quote!(
                fn job() -> Pin<Box<dyn Future<Output = u32> + Unpin + Send>> {
                    Box::pin(std::future::ready(1))
                }
            ),
        ] {
            let parsed = parse(quote!(), item);
            let errors: Vec<String> = parsed
                .errors
                .into_iter()
                .flatten()
                .map(|e| e.to_string())
                .collect();
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].starts_with("a gated future is not `Unpin`"));
            let input = parsed.input.expect("still gated");
            let output = input.func.sig.output.to_token_stream().to_string();
            assert!(!output.contains("Unpin"), "{output}");
            assert!(output.contains("Send"), "{output}");
        }
    }

    #[test]
    fn crate_must_be_a_path_in_a_string() {
        assert_eq!(
            error(quote!(crate = leader_runtime), sync_fn()),
            "`crate` takes a path in a string: `crate = \"::leader_runtime\"`"
        );
        for bad in ["", "not a path", "a::", "a::<T>", "fn", "1"] {
            assert_eq!(
                error(quote!(crate = #bad), sync_fn()),
                format!("`crate` takes the path of the runtime crate, not {bad:?}: e.g. `crate = \"::leader_runtime\"`")
            );
        }
    }

    #[test]
    fn missing_comma_is_a_syntax_error() {
        assert_eq!(
            error(quote!(group = "a" cancel_on_loss), async_fn()),
            "expected `,`"
        );
    }

    #[test]
    fn not_on_a_function() {
        let cases = [
            (
                quote!(
                    struct Job;
                ),
                "a struct",
            ),
            (
                quote!(
                    enum Job {}
                ),
                "an enum",
            ),
            (quote!(impl Job {}), "an impl block"),
            (
                quote!(
                    mod jobs {}
                ),
                "a module",
            ),
            (
                quote!(
                    static JOB: u8 = 0;
                ),
                "a static",
            ),
            (
                quote!(
                    trait Job {}
                ),
                "a trait",
            ),
        ];
        for (item, what) in cases {
            assert_eq!(
                error(quote!(), item),
                format!("`#[leader_only]` goes on a `fn` or `async fn`, not on {what}")
            );
        }
    }

    #[test]
    fn function_without_a_body() {
        assert_eq!(
            error(
                quote!(),
                quote!(
                    async fn tick(&self);
                )
            ),
            "`#[leader_only]` needs a function with a body: `fn name() { .. }`"
        );
    }

    #[test]
    fn const_fn() {
        assert_eq!(
            error(
                quote!(),
                quote!(
                    const fn tick() {}
                )
            ),
            "`#[leader_only]` can't gate a `const fn`: remove `const`"
        );
    }

    #[test]
    fn extern_abi() {
        assert_eq!(
            error(
                quote!(),
                quote!(
                    extern "C" fn tick() {}
                )
            ),
            "`#[leader_only]` gates Rust functions only: remove `extern \"C\"`"
        );
        // Parsed from a string: rustfmt would turn `extern fn` into `extern "C" fn`.
        let item: TokenStream = "extern fn tick() {}".parse().unwrap();
        assert_eq!(
            error(quote!(), item),
            "`#[leader_only]` gates Rust functions only: remove `extern`"
        );
    }

    #[test]
    fn never_returning_fn() {
        assert!(error(
            quote!(),
            quote!(
                fn tick() -> ! {
                    loop {}
                }
            )
        )
        .starts_with("`#[leader_only]` can't gate a function returning `!`"));
        // A `macro_rules!` `$ret:ty` arrives in an invisible group.
        let never = proc_macro2::Group::new(proc_macro2::Delimiter::None, quote!(!));
        assert!(error(
            quote!(),
            quote!(
                fn tick() -> #never {
                    loop {}
                }
            )
        )
        .starts_with("`#[leader_only]` can't gate a function returning `!`"));
    }

    #[test]
    fn applied_twice() {
        assert_eq!(
            error(
                quote!(),
                quote!(
                    #[leader_only(group = "b")]
                    fn tick() {}
                )
            ),
            "duplicate `#[leader_only]`: a function has one group; keep one attribute"
        );
    }

    #[test]
    fn several_mistakes_are_reported_together() {
        let all = errors(
            quote!(group = "a b", timeout = 5, cancel_on_loss),
            quote!(
                const extern "C" fn tick() {}
            ),
        );
        assert_eq!(all.len(), 5, "{all:?}");
        assert!(all[0].starts_with("group name contains"));
        assert!(all[1].starts_with("unknown argument `timeout`"));
        assert!(all[2].contains("`const fn`"));
        assert!(all[3].contains("remove `extern \"C\"`"));
        assert!(all[4].starts_with("`cancel_on_loss` needs an `async fn`"));
    }

    fn kind(item: TokenStream) -> &'static str {
        match ok(quote!(), item).kind {
            Kind::Async => "async",
            Kind::Future { boxed: false } => "impl future",
            Kind::Future { boxed: true } => "boxed future",
            Kind::Sync => "sync",
        }
    }

    #[test]
    fn default_with_and_without_a_value() {
        let input = ok(quote!(group = "reaper", default), sync_fn());
        assert!(matches!(input.args.default, Some(Fallback::Default(_))));
        let input = ok(quote!(default = Ok(0), group = "reaper"), sync_fn());
        let Some(Fallback::Expr(expr)) = input.args.default else {
            panic!("expected an expression");
        };
        assert_eq!(expr.to_token_stream().to_string(), "Ok (0)");
        assert!(ok(quote!(), sync_fn()).args.default.is_none());
        assert_eq!(
            error(quote!(default(0)), sync_fn()),
            "`default` takes an expression or nothing: `default = Ok(0)` or `default`"
        );
        assert_eq!(
            error(quote!(default, default = 1), sync_fn()),
            "duplicate argument `default`"
        );
    }

    #[test]
    fn group_in_an_invisible_group_from_macro_rules() {
        use proc_macro2::{Delimiter, Group};
        let invisible = |tokens: TokenStream| Group::new(Delimiter::None, tokens);
        let literal = invisible(quote!("cleanup"));
        let expr = invisible(quote!(#literal));
        for value in [literal, expr] {
            let input = ok(quote!(group = #value), sync_fn());
            assert_eq!(input.args.group.value(), "cleanup");
        }
        let bad = invisible(quote!("a b"));
        assert!(error(quote!(group = #bad), sync_fn()).starts_with("group name contains ' '"));
    }

    #[test]
    fn the_function_is_still_gated_when_only_the_arguments_are_wrong() {
        let parsed = parse(quote!(group = "a b", grop = 1), sync_fn());
        assert_eq!(parsed.errors.into_iter().flatten().count(), 2);
        let input = parsed.input.expect("gated with a placeholder");
        assert_eq!(input.args.group.value(), "default");
        let parsed = parse(quote!(cancel_on_loss), sync_fn());
        assert!(parsed.errors.is_some());
        assert!(!parsed.input.expect("gated").args.cancel_on_loss);
        // A function that can't be gated is not.
        let parsed = parse(
            quote!(grop = 1),
            quote!(
                const fn tick() {}
            ),
        );
        assert_eq!(parsed.errors.into_iter().flatten().count(), 2);
        assert!(parsed.input.is_none());
    }

    #[test]
    fn functions_returning_futures_are_recognised() {
        assert_eq!(kind(async_fn()), "async");
        assert_eq!(kind(sync_fn()), "sync");
        assert_eq!(
            kind(quote!(
                fn job() -> impl Future<Output = u32> + Send + 'static {
                    async { 1 }
                }
            )),
            "impl future"
        );
        assert_eq!(
            kind(quote!(
                fn job<'a>(
                    &'a self,
                ) -> ::core::pin::Pin<
                    Box<dyn ::core::future::Future<Output = u32> + ::core::marker::Send + 'a>,
                > {
                    Box::pin(async move { 1 })
                }
            )),
            "boxed future"
        );
        // Not futures: other traits (a future the attribute cannot see is
        // refused: see above).
        for item in [
            quote!(
                fn job() -> impl Iterator<Item = u32> {
                    0..1
                }
            ),
            quote!(
                fn job() -> Pin<Box<dyn Fn()>> {
                    Box::pin(|| ())
                }
            ),
            quote!(
                fn job() -> Box<dyn std::error::Error> {
                    todo!()
                }
            ),
        ] {
            assert_eq!(kind(item), "sync");
        }
        // `cancel_on_loss` can stop a returned future.
        let input = ok(
            quote!(cancel_on_loss),
            quote!(
                fn job() -> impl Future<Output = ()> {
                    async {}
                }
            ),
        );
        assert!(input.args.cancel_on_loss);
    }

    #[test]
    fn track_caller_on_a_sync_fn() {
        let expected = "`#[track_caller]` can't reach through `#[leader_only]` on a sync fn: the body runs in a closure; remove `#[track_caller]`";
        assert_eq!(
            error(
                quote!(),
                quote!(
                    #[track_caller]
                    fn tick() {}
                )
            ),
            expected
        );
        let parsed = parse(
            quote!(),
            quote!(
                #[track_caller]
                fn tick() {}
            ),
        );
        assert!(parsed.input.is_some(), "still gated");
        // An async body is no closure: rustc's own lint speaks for it.
        ok(
            quote!(),
            quote!(
                #[track_caller]
                async fn tick() {}
            ),
        );
    }
}
