//! The `#[leader_only]` attribute. Use it through `leader-runtime`, which re-exports it.
use proc_macro::TokenStream;

/// See `leader_runtime::leader_only`.
#[proc_macro_attribute]
pub fn leader_only(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
