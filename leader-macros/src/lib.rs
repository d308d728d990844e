//! The `#[leader_only]` attribute of `leader-runtime`.
//!
//! Depend on `leader-runtime`, not on this crate: it re-exports the attribute
//! as `leader_runtime::leader_only`, and the code the attribute generates
//! calls into `leader_runtime::__private`, a private contract between the two
//! crates of one version.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use proc_macro::TokenStream;

mod expand;
mod parse;

/// Run a function's body only on the instance that leads the function's group.
///
/// Every instance calls the function as usual. The body runs only where this
/// instance holds the group's lease: the call returns `Some(value)` there and
/// `None` everywhere else. So the return type `T` becomes `Option<T>`, and a
/// function without one returns `Option<()>`.
///
/// It works on sync and async functions, on free functions and methods
/// (`&self`, `&mut self`, `self`), with generics, where clauses and
/// `impl Trait` arguments and return types. `return` and `?` in the body mean
/// what they meant: they end the body, and the call returns their value in
/// `Some`.
///
/// # Examples
///
/// ```ignore
/// use leader_runtime::leader_only;
///
/// #[leader_only(group = "cleanup")]
/// async fn purge_expired(db: &Db) -> anyhow::Result<u64> {
///     let n = db.delete_expired().await?;
///     Ok(n)
/// }
///
/// // On every instance, on every tick:
/// match purge_expired(&db).await {
///     Some(Ok(n)) => tracing::info!(n, "purged"),
///     Some(Err(e)) => tracing::error!(%e, "purge failed"),
///     None => {} // another instance leads "cleanup"
/// }
/// ```
///
/// # Arguments
///
/// | argument | meaning |
/// | --- | --- |
/// | *(none)* | the group `"default"` |
/// | `group = "cleanup"` | the group, i.e. which lease gates the body: ASCII letters, digits, `.`, `_`, `:` and `-`, at most 128 bytes; checked at compile time |
/// | `cancel_on_loss` | async functions only: when leadership ends while the body runs, stop it (drop its future) and return `None` |
/// | `crate = "::my_leader"` | the path of the `leader_runtime` crate, for a crate that renamed the dependency or re-exports it; default `::leader_runtime` |
///
/// Arguments are separated by commas, in any order:
/// `#[leader_only(group = "reaper", cancel_on_loss)]`.
///
/// # Expansion
///
/// An async function
///
/// ```ignore
/// #[leader_only(group = "cleanup", cancel_on_loss)]
/// pub async fn purge(&self, before: Time) -> Result<u64, Error> {
///     /* body */
/// }
/// ```
///
/// is the same as the hand-written
///
/// ```ignore
/// pub async fn purge(&self, before: Time) -> ::core::option::Option<Result<u64, Error>> {
///     static __LEADER_SITE: ::leader_runtime::__private::CallSite =
///         ::leader_runtime::__private::CallSite::new("cleanup");
///     ::leader_runtime::__private::gate_async(&__LEADER_SITE, true, async move {
///         /* body */
///     })
///     .await
/// }
/// ```
///
/// where the async block also starts with a never-taken
/// `if false { return <Result<u64, Error>>; }`, so that the body's
/// coercions (`Box::new(e)` into `Box<dyn Error>`, `"msg".into()`, `?`) know
/// their target type, as they do in the body of an ordinary `async fn`.
///
/// A sync function
///
/// ```ignore
/// #[leader_only]
/// fn rotate_keys(store: &Store) -> usize {
///     /* body */
/// }
/// ```
///
/// is the same as
///
/// ```ignore
/// fn rotate_keys(store: &Store) -> ::core::option::Option<usize> {
///     static __LEADER_SITE: ::leader_runtime::__private::CallSite =
///         ::leader_runtime::__private::CallSite::new("default");
///     ::leader_runtime::__private::gate_sync(&__LEADER_SITE, move || -> usize {
///         /* body */
///     })
/// }
/// ```
///
/// (without the closure's `-> usize` when the return type names `impl Trait`).
/// Everything else — attributes, doc comments, visibility, generics, the
/// where clause, the receiver — stays as written. The `static` is the call
/// site: it caches the group's handle, so that after the first call the check
/// is local.
///
/// # Errors
///
/// Misuse is a compile error that points at the offending token: the
/// attribute on something other than a function, or on a `const fn`, an
/// `extern "C" fn` or a function without a body; an unknown or repeated
/// argument; a `group` that is not a string literal or not a valid group
/// name; `cancel_on_loss` on a sync function; a `crate` that is not a path in
/// a string. The function is still emitted unchanged next to the error, so its
/// callers report nothing more.
///
/// # Cancel safety
///
/// Dropping the future of a gated async function drops the body's future, as
/// for any `async fn`. With `cancel_on_loss`, the runtime does that itself
/// when leadership ends mid-run, and the call returns `None`.
#[proc_macro_attribute]
pub fn leader_only(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::leader_only(args.into(), item.into()).into()
}
