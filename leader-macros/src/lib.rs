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
/// function without one returns `Option<()>`. With `default`, the signature
/// stays as written and a call that did not run returns a fallback value
/// instead (for trait impls, see below).
///
/// It works on sync and async functions, on free functions and methods
/// (`&self`, `&mut self`, `self`, `self: Box<Self>`, `Arc<Self>`,
/// `Pin<&mut Self>`), with generics, where clauses and `impl Trait`
/// arguments and return types. `return` and `?` in the body mean what they
/// meant: they end the body, and the call returns their value in `Some`.
///
/// A sync function that returns a future — `impl Future<Output = T>`, or
/// `Pin<Box<dyn Future<Output = T> + ..>>` as `#[async_trait]` writes every
/// method — is gated like an `async fn`: for the future's whole life, from
/// its first poll to its end, so that `current_lease()` answers inside it,
/// `step_down` and `shutdown` wait for it and `cancel_on_loss` can stop it.
/// Its output becomes `Option<T>`. A return type the attribute takes for a
/// future it can't gate — by its name: a last path segment ending in
/// `Future`, as in an alias (`BoxFuture<'_, T>`), `Box<dyn Future<..>>`
/// without `Pin`, or `impl IntoFuture<..>` — is a compile error: gated as a
/// sync function, only the future's construction would be, not its run.
/// Write the type out, or make the function `async`. (The attribute reads
/// names, not types: a future behind an alias named otherwise, or inside an
/// `Option` or a `Result`, is gated as a sync function's value; a type
/// named `..Future` that is not a future passes under an alias named
/// otherwise.)
///
/// For that, the whole body, its sync part too, runs at the first poll, and
/// until then the returned future holds the parameters, as an `async fn`'s
/// does. So some signatures that are valid without the attribute are not
/// with it:
///
/// - `+ 'static` (or `Pin<Box<dyn Future<..>>>` without a lifetime, which
///   means `'static`), or a `use<..>` that leaves a parameter out, while a
///   parameter borrows (`&self`, `name: &str`): the future holds the borrow,
///   even if the body copies what it needs before its `async move` block.
///   Write `'_`; or, for a future to spawn, gate an `async fn` that takes
///   what it needs by value, and call it with that (`purge(self.n)`).
/// - `+ Send` while a parameter is not `Send` (an `Rc`, a `&` to something
///   not `Sync`), even if only a copy of a value moves into the `async`
///   block: again the future holds the parameter. Take the value before the
///   call and pass it instead.
/// - `+ Unpin`: the gated future never is; the bound is refused with an
///   error. Pin the future where it is polled (`Box::pin(..)`, `pin!(..)`).
///
/// And the output `Option<T>` is not `#[must_use]`: an attribute can mark
/// what a call returns, here the future, not the future's output, so
/// `purge().await;` drops an `Option<Result<..>>` without a warning. An
/// `async fn` has none of these limits: prefer it where you can.
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
/// The result is `#[must_use]` (unless the function returns nothing, or
/// returns a future: see above): a dropped `Option<Result<..>>` would lose
/// the body's error silently.
///
/// **Do not `.expect()` it.** Where a caller still expects `T`, rustc
/// suggests `.expect(..)` on the `Option`: that panics on every follower, on
/// every tick. Handle `None` (`if let Some(..)`, `let Some(..) = .. else {
/// return }`, `?` in a function returning `Option`), or use `default`.
///
/// ## `default`: keep the signature
///
/// `default` (needs `T: Default`) or `default = expr` (any expression of
/// type `T`, evaluated only where the body did not run) keeps the return
/// type `T`, so the attribute fits where the signature is fixed: trait
/// impls (also `#[async_trait]` ones), functions used as `fn` pointers,
/// below `#[instrument(err)]`. The caller can no longer tell "did not run"
/// from the fallback, so prefer `Option<T>` where you can.
///
/// ```ignore
/// impl Reaper for Db {
///     #[leader_only(group = "reaper", default = Ok(0))]
///     async fn reap(&self) -> Result<u64, Error> {
///         self.delete_orphans().await
///     }
/// }
///
/// #[async_trait]
/// impl Job for Db {
///     #[leader_only(group = "reaper", default)]
///     async fn run(&self) -> u64 { /* .. */ }
/// }
/// ```
///
/// The expression can't use a parameter that the body names unless the
/// parameter is `Copy` (a number, a `&T`, `&self`): the body's closure or
/// `async move` block takes every parameter it names, by value, also one
/// the body only borrows (`items.iter()`), so `default = items.len()` is
/// "borrow of moved value: `items`" when the body uses `items: Vec<_>`. Use
/// a `Copy` value instead (`&self`, a `&[T]` parameter, a count), or compute
/// the fallback before the call and pass it in as a parameter.
///
/// # Arguments
///
/// | argument | meaning |
/// | --- | --- |
/// | *(none)* | the group `"default"` |
/// | `group = "cleanup"` | the group, i.e. which lease gates the body: ASCII letters, digits, `.`, `_`, `:` and `-`, at most 128 bytes; checked at compile time; a `macro_rules!` `$group:literal` or `$group:expr` works too |
/// | `default` | keep the return type `T`; return `T::default()` where the body did not run |
/// | `default = expr` | keep the return type `T`; return `expr` where the body did not run |
/// | `cancel_on_loss` | async functions (and sync ones returning a future) only: when leadership ends while the body runs, stop it (drop its future) and return `None` (or the default) |
/// | `crate = "::my_leader"` | the path of the `leader_runtime` crate, for a crate that renamed the dependency or re-exports it; default `::leader_runtime` |
///
/// Arguments are separated by commas, in any order:
/// `#[leader_only(group = "reaper", cancel_on_loss)]`.
///
/// # With other attributes
///
/// - `#[tracing::instrument]` **above** `#[leader_only]` expands first and
///   instruments the body: a span only where the body runs, and `ret` and
///   `err` see the body's `T`. **Below** it, it instruments the gated call:
///   a span on every instance and every call, `ret` records the `Option<T>`,
///   and `err` needs `default` (it wants a `Result`).
/// - `#[tokio::main]` and `#[tokio::test]` do not go on a gated function:
///   gate a function that `main` or the test calls.
/// - `#[async_trait]` on an impl expands first; with `default`, its methods
///   are gated for their whole run (see above).
/// - `#[track_caller]` is refused on a sync function: the body runs in a
///   closure, which it does not reach.
/// - `clippy::option_option` does not fire on a gated `-> Option<T>`: the
///   outer `Option` is the expansion's.
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
/// #[must_use = "`Some` holds what the body returned, `None` that this instance does not lead the group"]
/// pub async fn purge(&self, before: Time) -> ::leader_runtime::__private::Option<Result<u64, Error>> {
///     ::leader_runtime::__private::gate_async(
///         {
///             static __LEADER_SITE: ::leader_runtime::__private::CallSite =
///                 ::leader_runtime::__private::CallSite::new("cleanup");
///             &__LEADER_SITE
///         },
///         true,
///         async move { /* body */ },
///     )
///     .await
/// }
/// ```
///
/// where the async block also starts with a never-taken
/// `if false { return __leader_output(); }`, `__leader_output` being a
/// closure `|| -> Result<u64, Error> { loop {} }` declared before the call,
/// so that the body's coercions (`Box::new(e)` into `Box<dyn Error>`,
/// `"msg".into()`, `?`) know their target type, as they do in the body of
/// an ordinary `async fn`. (It names the type outside the async block, where
/// a type of the same name that the body declares does not hide it.)
///
/// A sync function
///
/// ```ignore
/// #[leader_only(default)]
/// fn rotate_keys(store: &Store) -> usize {
///     /* body */
/// }
/// ```
///
/// is the same as
///
/// ```ignore
/// fn rotate_keys(store: &Store) -> usize {
///     match ::leader_runtime::__private::gate_sync(
///         { /* the call site, as above, with "default" */ },
///         move || -> usize { /* body */ },
///     ) {
///         ::leader_runtime::__private::Option::Some(__leader_value) => __leader_value,
///         ::leader_runtime::__private::Option::None => ::leader_runtime::__private::Default::default(),
///     }
/// }
/// ```
///
/// (with `impl Trait` in the closure's return type written `_`). A sync
/// function returning a future hands the closure to `gate_future` instead,
/// which gates the future the closure returns. Everything else — attributes,
/// doc comments, visibility, generics, the where clause, the receiver, the
/// body's braces, inner attributes at the top of the body (`#![allow(..)]`,
/// which then cover the new body) — stays as written. The `static` is the call site: it
/// caches the group's handle, so that after the first call the check is
/// local; its block keeps it out of the body's namespace. Every path goes
/// through `leader_runtime::__private`, so the expansion also works in
/// edition 2015.
///
/// # Errors
///
/// Misuse is a compile error that points at the offending token: the
/// attribute on something other than a function, or on a `const fn`, an
/// `extern "C" fn` or a function without a body; an unknown or repeated
/// argument; a `group` that is not a string literal or not a valid group
/// name; `cancel_on_loss` on a sync function that does not return a future;
/// a returned future the attribute can't see (an alias, `Box` without
/// `Pin`, `impl IntoFuture`); `+ Unpin` on a returned future; a
/// `crate` that is not a path in a string; `#[track_caller]` on a sync
/// function. When only the arguments are wrong, the function is still gated
/// (with a placeholder for what was wrong), as it is without a refused
/// `+ Unpin`; when the function itself can't be gated, it is emitted
/// unchanged. Either way its callers report nothing more.
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
