//! Test support for the leader workspace (not published).
