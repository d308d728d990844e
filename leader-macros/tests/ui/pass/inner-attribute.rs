// An inner attribute at the top of the body (`#![allow(..)]`) is legal in any fn body, and
// still covers the body: with it, nothing here warns (and warnings are denied).
#![deny(warnings)]
use leader_runtime::leader_only;
use std::future::Future;

#[leader_only(group = "jobs")]
fn tick() -> u32 {
    #![allow(unused_variables)]
    let unused = 1;
    2
}

#[leader_only(group = "jobs")]
async fn tock() -> u32 {
    #![allow(unused_variables)]
    let unused = 1;
    2
}

#[leader_only(group = "jobs", default)]
fn later() -> impl Future<Output = u32> {
    #![allow(unused_variables)]
    let unused = 1;
    async { 2 }
}

/// Outer attributes and doc comments stay on the function, in front of it.
#[leader_only(group = "jobs")]
#[inline]
async fn both() {
    #![allow(unused_mut)]
    let mut n = 1;
    let _ = n;
}

fn main() {
    let _: fn() -> Option<u32> = tick;
    drop((tock(), later(), both()));
}
