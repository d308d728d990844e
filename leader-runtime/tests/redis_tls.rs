//! `rediss://` against a real `redis-server --tls-port` with certificates the
//! test generates (`openssl`): election, notices and handover over TLS; an
//! untrusted CA, a plain connection to the TLS port and a missing client
//! certificate all fail with a clear error instead of electing.
#![cfg(feature = "tls")]

use std::time::Duration;

use leader_runtime::{Config, ConfigBuilder, Error, Event, Runtime};
use leader_testkit::{free_port, RedisServer, TlsFiles};
use tokio::time::{timeout, Instant};

mod support;
use support::{config, elected, lead, runtime, G};

// Generous: a TLS connect in a debug build loads and parses the system's
// root certificates (the redis crate does so for every connection), which
// takes a few hundred ms on a busy machine, and the connection manager tries
// twice before it reports the handshake's error instead of a timeout.
const TTL: Duration = Duration::from_millis(3000);
const RENEW: Duration = Duration::from_millis(1000);
const CALL_TIMEOUT: Duration = Duration::from_millis(1900);
/// How long a refused instance is watched for a wrongful election.
const WATCH: Duration = Duration::from_millis(1500);

struct TlsServer {
    server: RedisServer,
    tls: TlsFiles,
    tls_port: u16,
}

impl TlsServer {
    async fn start(require_client_cert: bool) -> TlsServer {
        let tls = TlsFiles::generate().unwrap();
        let tls_port = free_port().unwrap();
        let mut args = tls.server_args(tls_port);
        if require_client_cert {
            args.extend(["--tls-auth-clients".to_owned(), "yes".to_owned()]);
        }
        let server = RedisServer::builder().args(args).start().await.unwrap();
        TlsServer {
            server,
            tls,
            tls_port,
        }
    }

    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }

    fn builder(&self, url: &str, id: &str) -> ConfigBuilder {
        let config = config(id).redis_url(url).ttl(TTL).renew_interval(RENEW);
        config.call_timeout(CALL_TIMEOUT)
    }

    fn instance(&self, id: &str) -> Runtime {
        let ca = self.tls.ca_pem().unwrap();
        runtime(self.builder(&self.url(), id).tls_ca_certs(ca))
    }
}

/// `leader_id` fails, and the election never succeeds, within `wait`.
async fn refuses(rt: &Runtime, wait: Duration) -> String {
    let mut events = rt.subscribe();
    let err = rt.leader_id(G).await.unwrap_err();
    assert!(
        matches!(err, Error::Backend { .. } | Error::Timeout { .. }),
        "{err:?}"
    );
    assert!(rt.run_if_leader(G, || async {}).await.is_none());
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        let event = timeout(deadline - Instant::now(), events.recv()).await;
        assert!(
            !matches!(event, Ok(Ok(Event::Elected { .. }))),
            "elected over a connection that must fail"
        );
    }
    assert!(!rt.is_leader(G));
    err.to_string()
}

#[tokio::test]
async fn elects_and_hands_over_on_a_tls_server() {
    let s = TlsServer::start(false).await;
    let a = s.instance("a");
    let b = s.instance("b");
    assert_eq!(a.leader_id(G).await.unwrap(), None);
    let t1 = lead(&a, G, TTL * 3).await;
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    assert_eq!(b.leader_id(G).await.unwrap().as_deref(), Some("a"));
    assert_eq!(
        s.server.cmd(&["GET", "leader:{jobs}:lease"]).await.unwrap(),
        "a"
    );
    // The release notice arrives over b's TLS pub/sub connection.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut b_events = b.subscribe();
    let start = Instant::now();
    a.step_down(G).await.unwrap();
    let t2 = elected(&mut b_events, TTL).await;
    let handover = start.elapsed();
    s.server.check(
        handover < Duration::from_millis(500),
        format!("handover took {handover:?}"),
    );
    assert!(t2 > t1);
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test]
async fn an_untrusted_certificate_or_a_plain_connection_fails_clearly() {
    let s = TlsServer::start(false).await;
    // A CA that did not sign the server's certificate.
    let other = TlsFiles::generate().unwrap();
    let untrusted = Runtime::new(
        s.builder(&s.url(), "u")
            .tls_ca_certs(other.ca_pem().unwrap())
            .build()
            .unwrap(),
    )
    .unwrap();
    let msg = refuses(&untrusted, WATCH).await;
    assert!(
        msg.to_lowercase().contains("certificate") || msg.contains("UnknownIssuer"),
        "{msg}"
    );
    // The system's roots do not trust the test CA either.
    let system_roots = Runtime::new(s.builder(&s.url(), "r").build().unwrap()).unwrap();
    refuses(&system_roots, WATCH).await;
    // Plain RESP to the TLS port.
    let plain = Runtime::new(
        s.builder(&format!("redis://127.0.0.1:{}", s.tls_port), "p")
            .build()
            .unwrap(),
    )
    .unwrap();
    refuses(&plain, WATCH).await;
    assert!(s
        .server
        .cmd(&["GET", "leader:{jobs}:lease"])
        .await
        .unwrap()
        .is_nil());
}

#[tokio::test]
async fn a_server_that_verifies_clients_needs_the_client_certificate() {
    let s = TlsServer::start(true).await;
    let anonymous = s.instance("anon");
    refuses(&anonymous, WATCH).await;
    let config = s
        .builder(&s.url(), "a")
        .tls_ca_certs(s.tls.ca_pem().unwrap())
        .tls_client_cert(
            std::fs::read(s.tls.client_cert()).unwrap(),
            std::fs::read(s.tls.client_key()).unwrap(),
        )
        .build()
        .unwrap();
    let a = Runtime::new(config).unwrap();
    lead(&a, G, TTL * 3).await;
    assert_eq!(a.leader_id(G).await.unwrap().as_deref(), Some("a"));
    a.shutdown().await;
}

#[test]
fn tls_options_are_checked_when_building() {
    let field = |b: ConfigBuilder| match b.build() {
        Err(Error::Config { field, .. }) => field,
        other => panic!("expected a config error, got {other:?}"),
    };
    let pem = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec();
    assert_eq!(
        field(Config::builder().redis_url("redis://h:1").tls_ca_certs(pem)),
        "tls_ca_certs"
    );
    assert_eq!(
        field(
            Config::builder()
                .redis_url("rediss://h:1")
                .tls_ca_certs("not a pem")
        ),
        "tls_ca_certs"
    );
    assert_eq!(
        field(
            Config::builder()
                .redis_url("rediss://h:1")
                .tls_client_cert("not a pem", "not a key")
        ),
        "tls_client_cert"
    );
    Config::builder()
        .redis_url("rediss://u:pw@h:1")
        .build()
        .unwrap();
}
