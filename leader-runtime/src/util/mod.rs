//! Leaf helpers every layer may use: the clocks, jitter, and URLs and
//! texts with their passwords hidden.

pub(crate) mod clock;
pub(crate) mod jitter;
pub(crate) mod redact;
