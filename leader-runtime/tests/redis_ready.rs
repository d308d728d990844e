//! `Runtime::ready` against a real `redis-server`: a configuration Redis
//! refuses fails at once with a hint (and never shows the password), an
//! unreachable Redis fails within the timeout, a good configuration is ready.

use std::time::Duration;

use leader_runtime::{Config, Error, Runtime};
use leader_testkit::{free_port, RedisServer};
use tokio::time::Instant;

const G: &str = "jobs";
const PASSWORD: &str = "app-s3cret-pw";
const WRONG: &str = "wr0ng-pa55word";
/// The rules `ConfigBuilder::redis_url` documents, but EVALSHA and EVAL.
const NO_SCRIPTS: &str = "~leader:* &leader:released +script|load +get +set \
                          +pexpire +pttl +del +time +info +type +hmget +hset +publish +subscribe +ping";
/// Long: a refusal must not wait for it.
const PATIENCE: Duration = Duration::from_secs(30);

async fn server() -> RedisServer {
    RedisServer::builder()
        .password("admin-pw")
        .acl_user("app", PASSWORD, "allcommands allkeys allchannels")
        .acl_user("noscripts", PASSWORD, NO_SCRIPTS)
        .start()
        .await
        .unwrap()
}

fn runtime(url: &str) -> Runtime {
    Runtime::new(
        Config::builder()
            .redis_url(url)
            .ttl(Duration::from_secs(2))
            .retry_interval(Duration::from_millis(200))
            .build()
            .unwrap(),
    )
    .unwrap()
}

/// `ready` refuses `url` at once with an `Error::Misconfigured` whose text
/// says `hint` and shows no password; returns that text.
async fn refused(server: &RedisServer, url: &str, hint: &str) -> String {
    let rt = runtime(url);
    let start = Instant::now();
    let err = rt.ready_for([G], PATIENCE).await.unwrap_err();
    let took = start.elapsed();
    let text = err.to_string();
    server.check(
        took < Duration::from_secs(5),
        format!("a refusal took {took:?}: {text}"),
    );
    assert!(
        matches!(err, Error::Misconfigured { .. }) && err.is_config(),
        "{err:?}"
    );
    assert!(text.contains(hint), "the hint is missing: {text}");
    for secret in [PASSWORD, WRONG, "admin-pw"] {
        assert!(!text.contains(secret), "{text}");
        assert!(!format!("{err:?}").contains(secret), "{err:?}");
    }
    assert!(!rt.is_leader(G));
    rt.shutdown().await;
    text
}

#[tokio::test]
async fn a_wrong_password_is_refused_at_once() {
    let server = server().await;
    let url = format!("redis://app:{WRONG}@127.0.0.1:{}", server.port());
    let text = refused(&server, &url, "user and password").await;
    assert!(text.starts_with("redis refused the connection: "), "{text}");
}

#[tokio::test]
async fn a_missing_password_is_refused_at_once() {
    let server = server().await;
    let url = format!("redis://127.0.0.1:{}", server.port());
    refused(&server, &url, "password").await;
}

#[tokio::test]
async fn a_database_the_server_lacks_is_refused_at_once() {
    let server = RedisServer::start().await.unwrap();
    let url = format!("redis://127.0.0.1:{}/99", server.port());
    refused(&server, &url, "database").await;
}

#[tokio::test]
async fn an_acl_rule_missing_is_refused_for_the_group() {
    let server = server().await;
    let url = format!("redis://noscripts:{PASSWORD}@127.0.0.1:{}", server.port());
    // PING is allowed: the refusal comes from the group's first round.
    let text = refused(&server, &url, "ACL").await;
    assert!(
        text.contains("no permissions") && text.contains("group `jobs`"),
        "{text}"
    );
}

#[tokio::test]
async fn an_unreachable_redis_is_not_ready_within_the_timeout() {
    let port = free_port().unwrap();
    let rt = runtime(&format!("redis://127.0.0.1:{port}"));
    let timeout = Duration::from_secs(1);
    let start = Instant::now();
    let err = rt.ready(timeout).await.unwrap_err();
    let took = start.elapsed();
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(2),
        "{took:?}"
    );
    assert!(
        matches!(&err, Error::NotReady { after, .. } if *after == timeout) && !err.is_config(),
        "{err:?}"
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn a_good_configuration_is_ready() {
    let server = server().await;
    let url = format!("redis://app:{PASSWORD}@127.0.0.1:{}", server.port());
    let (a, b) = (runtime(&url), runtime(&url));
    a.ready_for([G], PATIENCE).await.unwrap();
    b.ready_for([G], PATIENCE).await.unwrap();
    // Exactly one of them leads (or will, after a first-election safe start).
    let holder = a.leader_id(G).await.unwrap();
    assert!(
        holder.as_deref() == Some(a.instance_id()) || holder.as_deref() == Some(b.instance_id()),
        "{holder:?}"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_cluster_is_ready() {
    let cluster = leader_testkit::RedisCluster::start().await.unwrap();
    let config = Config::builder()
        .redis_cluster_urls(cluster.urls())
        .ttl(Duration::from_secs(2))
        .build()
        .unwrap();
    let rt = Runtime::new(config).unwrap();
    rt.ready_for([G, "other"], PATIENCE).await.unwrap();
    rt.shutdown().await;
}
