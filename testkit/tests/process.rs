//! Child-process helpers: output capture, signals, the shared clock.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use leader_testkit::{monotonic_now_ns, process_state, signal, ChildProcess, Signal};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

const WAIT: Duration = Duration::from_secs(5);

fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script);
    cmd
}

#[tokio::test]
async fn captures_stdout_and_stderr_lines_with_env() {
    let mut cmd = sh(r#"echo "foo=$FOO"; echo oops >&2; printf 'second\r\nno newline'"#);
    cmd.env("FOO", "bar");
    let mut child = ChildProcess::spawn(cmd).unwrap();
    let line = child
        .stdout()
        .wait_for(|l| l.starts_with("foo="), WAIT)
        .await
        .unwrap();
    assert_eq!(line, "foo=bar");
    let out = child.stdout().wait_closed(WAIT).await.unwrap();
    assert_eq!(out, ["foo=bar", "second", "no newline"]);
    assert!(child.stdout().is_closed());
    assert_eq!(child.stderr().wait_closed(WAIT).await.unwrap(), ["oops"]);
    assert!(child.wait_timeout(WAIT).await.unwrap().success());
    let transcript = child.transcript();
    assert!(
        transcript.contains("foo=bar") && transcript.contains("oops"),
        "{transcript}"
    );
}

#[tokio::test]
async fn waits_for_later_occurrences_and_reports_eof() {
    let child = ChildProcess::spawn(sh("echo tick; echo tock; echo tick")).unwrap();
    let out = child.stdout().clone();
    let (first, _) = out.wait_for_from(0, |l| l == "tick", WAIT).await.unwrap();
    let (second, _) = out
        .wait_for_from(first + 1, |l| l == "tick", WAIT)
        .await
        .unwrap();
    assert_eq!((first, second), (0, 2));
    let err = out
        .wait_for_from(second + 1, |l| l == "tick", WAIT)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    assert!(err.to_string().contains("tock"), "{err}");
}

#[tokio::test]
async fn wait_for_times_out_listing_the_lines_seen() {
    let child = ChildProcess::spawn(sh("echo only; exec sleep 30")).unwrap();
    let start = Instant::now();
    let err = child
        .stdout()
        .wait_for(|l| l == "never", Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert!(err.to_string().contains("only"), "{err}");
    assert_eq!(child.stdout().snapshot(), ["only"]);
    assert_eq!(child.stdout().len(), 1);
    assert!(!child.stdout().is_closed());
}

#[tokio::test]
async fn kill9_kills_and_reaped_children_are_not_signalled() {
    let mut child = ChildProcess::spawn(sh("exec sleep 30")).unwrap();
    child.kill9().unwrap();
    let status = child.wait_timeout(WAIT).await.unwrap();
    assert_eq!(status.signal(), Some(9));
    let err = child.terminate().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
}

#[tokio::test]
async fn terminate_lets_the_child_clean_up() {
    let script =
        r#"trap 'echo cleaning up; exit 3' TERM; echo ready; while :; do sleep 0.01; done"#;
    let mut child = ChildProcess::spawn(sh(script)).unwrap();
    child
        .stdout()
        .wait_for(|l| l == "ready", WAIT)
        .await
        .unwrap();
    child.terminate().unwrap();
    let status = child.wait_timeout(WAIT).await.unwrap();
    assert_eq!(status.code(), Some(3), "{}", child.transcript());
    child
        .stdout()
        .wait_for(|l| l == "cleaning up", WAIT)
        .await
        .unwrap();
}

#[tokio::test]
async fn pause_stops_output_until_resume() {
    let script = "i=0; while :; do echo $i; i=$((i+1)); sleep 0.01; done";
    let child = ChildProcess::spawn(sh(script)).unwrap();
    let out = child.stdout();
    out.wait_for(|l| l == "3", WAIT).await.unwrap();

    child.pause().unwrap();
    assert_eq!(process_state(child.pid()), Some('T'));
    let before = out.len();
    // Absence of output can only be observed over a window; at most a line
    // already in the pipe may still arrive.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = out.len();
    assert!(
        after <= before + 1,
        "{before} -> {after} lines while stopped"
    );

    child.resume().unwrap();
    assert_ne!(process_state(child.pid()), Some('T'));
    out.wait_for_from(after + 2, |_| true, WAIT).await.unwrap();
}

#[tokio::test]
async fn stdin_is_piped() {
    let mut child = ChildProcess::spawn(Command::new("cat")).unwrap();
    let mut stdin = child.stdin().take().unwrap();
    stdin.write_all(b"hello\n").await.unwrap();
    child
        .stdout()
        .wait_for(|l| l == "hello", WAIT)
        .await
        .unwrap();
    drop(stdin); // EOF: cat exits
    assert!(child.wait_timeout(WAIT).await.unwrap().success());
}

#[tokio::test]
async fn wait_timeout_reports_a_running_child() {
    let mut child = ChildProcess::spawn(sh("echo alive; exec sleep 30")).unwrap();
    child
        .stdout()
        .wait_for(|l| l == "alive", WAIT)
        .await
        .unwrap();
    let err = child
        .wait_timeout(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    assert!(err.to_string().contains("alive"), "{err}");
    assert!(child.try_wait().unwrap().is_none());
}

#[tokio::test]
async fn drop_kills_the_child() {
    let child = ChildProcess::spawn(sh("exec sleep 30")).unwrap();
    let pid = child.pid();
    drop(child);
    let deadline = Instant::now() + WAIT;
    // Dead once gone or a zombie (reaped in the background).
    while !matches!(process_state(pid), None | Some('Z')) {
        assert!(Instant::now() < deadline, "child {pid} survived the drop");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn signalling_a_missing_process_fails() {
    // Pids are at most 2^22 on Linux.
    let err = signal(u32::MAX >> 1, Signal::SIGCONT).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(nix::errno::Errno::ESRCH as i32));
}

/// Run as a child of itself (see the env var): both processes read one clock.
#[tokio::test]
async fn monotonic_clock_is_shared_with_children() {
    const AS_CHILD: &str = "LEADER_TESTKIT_PRINT_CLOCK";
    if std::env::var_os(AS_CHILD).is_some() {
        println!("mono={}", monotonic_now_ns());
        return;
    }
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "monotonic_clock_is_shared_with_children",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(AS_CHILD, "1");
    let before = monotonic_now_ns();
    let mut child = ChildProcess::spawn(cmd).unwrap();
    let line = child
        .stdout()
        .wait_for(|l| l.contains("mono="), Duration::from_secs(10))
        .await
        .unwrap();
    let after = monotonic_now_ns();
    // libtest may have printed "test NAME ... " on the same line.
    let theirs: u64 = line.split("mono=").nth(1).unwrap().parse().unwrap();
    assert!(
        before <= theirs && theirs <= after,
        "{before} <= {theirs} <= {after}"
    );
    assert!(child.wait_timeout(WAIT).await.unwrap().success());
}
