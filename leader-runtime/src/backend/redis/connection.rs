//! The connection to Redis: the client for one server, a cluster or a
//! Sentinel-managed primary (`sentinel.rs`), TLS, and `Conn`, the one
//! connection type the backend's commands go through.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};

use crate::backend::sentinel::SentinelConn;
use crate::util::redact::redact_url;
use crate::{Error, Result};

/// Where and how to reach Redis, as the config builder collected it.
#[derive(Clone)]
pub(crate) struct RedisConfig {
    /// The server's URL, or the seed nodes of a cluster.
    pub(crate) urls: Vec<String>,
    /// Redis Cluster (`redis_cluster_urls`) rather than one server (`redis_url`).
    pub(crate) cluster: bool,
    /// Sentinel (`redis_sentinel`): the master's name; `urls` are the sentinels'.
    pub(crate) sentinel: Option<String>,
    pub(crate) options: RedisOptions,
    /// The environment variable the URLs were cut from, if any: messages
    /// then name a URL by its position in it, never by a piece of it (a cut
    /// may have fallen inside a password).
    pub(crate) from_variable: Option<&'static str>,
}

/// Settings for either kind of deployment, set independently of the URLs.
#[derive(Clone, Default)]
pub(crate) struct RedisOptions {
    /// PEM certificates of the CAs to trust instead of the system's roots.
    pub(crate) tls_ca: Option<Vec<u8>>,
    /// PEM client certificate chain and private key, for servers that verify clients.
    pub(crate) tls_client: Option<(Vec<u8>, Vec<u8>)>,
    /// After each acquisition, `WAIT` for this many replicas (0: don't).
    pub(crate) min_replicas: u32,
    /// Sentinel only: user (empty: none) and password for the master.
    pub(crate) master_auth: Option<(String, String)>,
}

impl RedisOptions {
    /// The builder method of the first option that is set, if any.
    pub(crate) fn first_set(&self) -> Option<&'static str> {
        if self.tls_ca.is_some() {
            Some("tls_ca_certs")
        } else if self.tls_client.is_some() {
            Some("tls_client_cert")
        } else if self.min_replicas > 0 {
            Some("min_replicas")
        } else if self.master_auth.is_some() {
            Some("sentinel_master_auth")
        } else {
            None
        }
    }
}

impl RedisConfig {
    pub(crate) fn standalone(url: String) -> Self {
        Self {
            urls: vec![url],
            cluster: false,
            sentinel: None,
            options: RedisOptions::default(),
            from_variable: None,
        }
    }

    pub(crate) fn cluster(urls: Vec<String>) -> Self {
        Self {
            urls,
            cluster: true,
            sentinel: None,
            options: RedisOptions::default(),
            from_variable: None,
        }
    }

    pub(crate) fn sentinel(master_name: String, urls: Vec<String>) -> Self {
        Self {
            urls,
            cluster: false,
            sentinel: Some(master_name),
            options: RedisOptions::default(),
            from_variable: None,
        }
    }

    /// The builder method that set the URLs.
    pub(super) fn field(&self) -> &'static str {
        if self.cluster {
            "redis_cluster_urls"
        } else if self.sentinel.is_some() {
            "redis_sentinel"
        } else {
            "redis_url"
        }
    }

    /// Check every URL and option without connecting.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the builder method; never shows a password.
    pub(crate) fn validate(&self) -> Result<()> {
        Clients::new(self).map(drop)
    }

    /// The URLs with passwords redacted, and the options, for `Debug`.
    pub(crate) fn describe(&self) -> String {
        let urls: Vec<String> = self.urls.iter().map(|u| redact_url(u)).collect();
        let mut out = if self.cluster {
            format!("redis cluster [{}]", urls.join(", "))
        } else if let Some(master) = &self.sentinel {
            format!("redis sentinel {master:?} [{}]", urls.join(", "))
        } else {
            urls.join(", ")
        };
        match &self.options.master_auth {
            Some((user, _)) if !user.is_empty() => {
                out.push_str(&format!(" (master user {user:?}, password ***)"));
            }
            Some(_) => out.push_str(" (master password ***)"),
            None => {}
        }
        if self.options.tls_ca.is_some() {
            out.push_str(" (custom CA)");
        }
        if self.options.tls_client.is_some() {
            out.push_str(" (client certificate)");
        }
        if self.options.min_replicas > 0 {
            out.push_str(&format!(" (min_replicas {})", self.options.min_replicas));
        }
        out
    }
}

/// The clients a backend connects with, built (and so checked) without any I/O.
pub(super) struct Clients {
    /// One per URL: the server, or each seed node (used for release notices).
    /// Empty for Sentinel.
    pub(super) nodes: Vec<redis::Client>,
    pub(super) cluster: Option<ClusterClient>,
    /// The sentinel client and the master's database.
    pub(super) sentinel: Option<(redis::sentinel::SentinelClient, i64)>,
}

impl Clients {
    pub(super) fn new(config: &RedisConfig) -> Result<Self> {
        let field = config.field();
        if config.urls.is_empty() {
            return Err(Error::config(field, "needs at least one URL".to_owned()));
        }
        let tls_options = config.options.tls_ca.is_some() || config.options.tls_client.is_some();
        const CERT: &[u8] = b"-----BEGIN CERTIFICATE-----";
        if let Some(pem) = &config.options.tls_ca {
            if !contains(pem, CERT) {
                return Err(Error::config(
                    "tls_ca_certs",
                    "contains no PEM certificate".to_owned(),
                ));
            }
        }
        if let Some((cert, _)) = &config.options.tls_client {
            if !contains(cert, CERT) {
                return Err(Error::config(
                    "tls_client_cert",
                    "contains no PEM certificate".to_owned(),
                ));
            }
        }
        if config.options.master_auth.is_some() && config.sentinel.is_none() {
            return Err(Error::config(
                "sentinel_master_auth",
                format!("is for redis_sentinel, not {field}: put the credentials in the URL"),
            ));
        }
        let mut nodes = Vec::with_capacity(config.urls.len());
        let mut infos = Vec::with_capacity(config.urls.len());
        // How a message names a URL.
        let shown = |i: usize, url: &str| match config.from_variable {
            Some(name) => format!("URL {} of {name}", i + 1),
            None => redact_url(url),
        };
        for (i, url) in config.urls.iter().enumerate() {
            let tls = is_tls_url(url);
            if tls && !cfg!(feature = "tls") {
                return Err(Error::config(
                    field,
                    format!(
                        "uses TLS ({}), which needs the `tls` feature of leader-runtime",
                        shown(i, url)
                    ),
                ));
            }
            if tls_options && !tls {
                let option = config.options.first_set().unwrap_or("tls_ca_certs");
                return Err(Error::config(
                    option,
                    format!("needs rediss:// URLs, but {field} has {}", shown(i, url)),
                ));
            }
            let info = url.as_str().into_connection_info().map_err(|e| {
                Error::config(
                    field,
                    format!(
                        "must be a valid redis:// or rediss:// URL ({}): {}{}",
                        shown(i, url),
                        e.category(),
                        if config.from_variable.is_some() {
                            " (the variable is cut at commas and spaces: percent-encode them in a password, as %2C and %20)"
                        } else {
                            ""
                        }
                    ),
                )
            })?;
            if config.cluster && info.redis_settings().db() != 0 {
                return Err(Error::config(
                    field,
                    format!(
                        "must not name a database ({}): Redis Cluster has only database 0",
                        shown(i, url)
                    ),
                ));
            }
            if config.sentinel.is_some() {
                infos.push((info, shown(i, url)));
            } else {
                nodes.push(open_client(info, &config.options, field)?);
            }
        }
        if let Some(master) = &config.sentinel {
            let sentinel = crate::backend::sentinel::client(master, infos, &config.options)?;
            return Ok(Self {
                nodes,
                cluster: None,
                sentinel: Some(sentinel),
            });
        }
        let cluster = if config.cluster {
            // One retry, right away, follows a MOVED/ASK redirect (after a
            // failover or resharding) inside the call; a failed connection
            // is retried once after at most 20 ms. As with one server, the
            // election's own pacing decides about anything longer.
            let builder = ClusterClientBuilder::new(config.urls.iter().map(String::as_str))
                .retries(1)
                .min_retry_wait(0)
                .max_retry_wait(20);
            #[cfg(feature = "tls")]
            let builder = match tls_certificates(&config.options) {
                Some(certs) => builder.certs(certs),
                None => builder,
            };
            let client = builder.build().map_err(|e| {
                Error::config(
                    field,
                    format!(
                        "must share one scheme, user, password and database: {}",
                        e.detail().unwrap_or(e.category())
                    ),
                )
            })?;
            Some(client)
        } else {
            None
        };
        Ok(Self {
            nodes,
            cluster,
            sentinel: None,
        })
    }
}

pub(super) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

pub(crate) fn is_tls_url(url: &str) -> bool {
    let scheme = url.split("://").next().unwrap_or_default();
    scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
}

#[cfg(feature = "tls")]
pub(crate) fn tls_certificates(options: &RedisOptions) -> Option<redis::TlsCertificates> {
    if options.tls_ca.is_none() && options.tls_client.is_none() {
        return None;
    }
    Some(redis::TlsCertificates {
        client_tls: options
            .tls_client
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: options.tls_ca.clone(),
    })
}

pub(super) fn open_client(
    info: redis::ConnectionInfo,
    options: &RedisOptions,
    field: &'static str,
) -> Result<redis::Client> {
    #[cfg(feature = "tls")]
    if let Some(certs) = tls_certificates(options) {
        return redis::Client::build_with_tls(info, certs).map_err(|e| {
            let option = if options.tls_client.is_some() {
                "tls_client_cert"
            } else {
                "tls_ca_certs"
            };
            // The message names what failed to parse, never key material.
            Error::config(
                option,
                format!("is unusable: {}", e.detail().unwrap_or(e.category())),
            )
        });
    }
    let _ = options;
    redis::Client::open(info)
        .map_err(|e| Error::config(field, format!("is unusable: {}", e.category())))
}

/// rustls panics when no crypto provider can be determined (e.g. two
/// providers' features are on and the application installed none); install
/// ring, which the `tls` feature brings, unless one is installed already.
#[cfg(feature = "tls")]
pub(super) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race against another installer is fine: one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The command connection: both kinds reconnect by themselves, and a script
/// runs on the node that owns the slot of its first key.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConn),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(c) => c.get_db(),
        }
    }
}
