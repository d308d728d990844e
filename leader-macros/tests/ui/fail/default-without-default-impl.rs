// `default` needs `T: Default`; the error points at the argument.
use leader_runtime::leader_only;

pub struct Report;

#[leader_only(group = "reports", default)]
fn report() -> Report {
    Report
}

fn main() {
    let _: Report = report();
}
