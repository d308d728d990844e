//! What the instance processes of the end-to-end tests and benches share
//! (the `leader-instance` binary, and the load bench's instances): when the
//! runtime turned a leadership's view on or off, as it logged it.

pub mod transitions;
