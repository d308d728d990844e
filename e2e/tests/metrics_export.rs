//! `examples/metrics.rs`: the leadership metrics reach an installed
//! Prometheus recorder and render in its text format. (It installs the
//! process-wide recorder: one test in this file.)

#[path = "../../examples/metrics.rs"]
#[allow(dead_code)] // the example's `main`
mod metrics_example;

#[tokio::test]
async fn transitions_render_in_prometheus_text_format() {
    let handle = metrics_example::install().unwrap();
    let text = metrics_example::demo(&handle).await.unwrap();
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .parse()
            .unwrap()
    };
    assert_eq!(value(r#"leader_elected_total{group="reports"}"#), 3.0);
    assert_eq!(
        value(r#"leader_lost_total{group="reports",reason="stepped_down"}"#),
        2.0
    );
    assert_eq!(
        value(r#"leader_lost_total{group="reports",reason="shutdown"}"#),
        1.0
    );
    assert_eq!(value(r#"leader_is_leader{group="reports"}"#), 0.0);
    assert!(value(r#"leader_acquire_attempts_total{group="reports"}"#) >= 3.0);
    assert!(value(r#"leader_renew_seconds_count{group="reports"}"#) >= 2.0);
    assert!(
        text.contains(r#"leader_renew_seconds_bucket{group="reports",le="0.005"}"#),
        "{text}"
    );
    assert!(
        text.contains("# TYPE leader_renew_seconds histogram"),
        "{text}"
    );
}
