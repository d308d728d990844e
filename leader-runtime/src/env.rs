//! The configuration the global runtime reads from the environment when it
//! is used before [`init`](crate::init).
//!
//! | variable | deployment |
//! | --- | --- |
//! | `LEADER_REDIS_URL` | one server: `redis://[user:password@]host:port[/db]` |
//! | `LEADER_REDIS_CLUSTER_URLS` | Redis Cluster: seed node URLs, comma-separated |
//! | `LEADER_REDIS_SENTINEL_MASTER` + `LEADER_REDIS_SENTINEL_URLS` | Sentinel: the master's name, and the sentinels' URLs, comma-separated |
//! | `LEADER_REDIS_SENTINEL_MASTER_USER`, `LEADER_REDIS_SENTINEL_MASTER_PASSWORD` | optional, Sentinel only: the master's credentials (see `sentinel_master_auth`) |
//! | `REDIS_URL` | one server, when none of the `LEADER_REDIS_*` deployments is set |
//!
//! At most one of the three `LEADER_REDIS_*` deployments may be set; an
//! empty variable counts as unset.

use crate::{Config, ConfigBuilder, Error, Result};

pub(crate) const URL: &str = "LEADER_REDIS_URL";
pub(crate) const CLUSTER_URLS: &str = "LEADER_REDIS_CLUSTER_URLS";
pub(crate) const SENTINEL_MASTER: &str = "LEADER_REDIS_SENTINEL_MASTER";
pub(crate) const SENTINEL_URLS: &str = "LEADER_REDIS_SENTINEL_URLS";
pub(crate) const SENTINEL_MASTER_USER: &str = "LEADER_REDIS_SENTINEL_MASTER_USER";
pub(crate) const SENTINEL_MASTER_PASSWORD: &str = "LEADER_REDIS_SENTINEL_MASTER_PASSWORD";
pub(crate) const FALLBACK_URL: &str = "REDIS_URL";

/// A builder with the backend the environment describes.
pub(crate) fn builder() -> Result<ConfigBuilder> {
    builder_from(|name| std::env::var(name).ok())
}

impl ConfigBuilder {
    /// A builder with the backend the environment describes, as the global
    /// runtime reads it when used before [`init`](crate::init):
    /// `LEADER_REDIS_URL`, `LEADER_REDIS_CLUSTER_URLS`,
    /// `LEADER_REDIS_SENTINEL_MASTER` + `LEADER_REDIS_SENTINEL_URLS` (and
    /// `LEADER_REDIS_SENTINEL_MASTER_USER` / `_PASSWORD`), else `REDIS_URL`.
    /// Set the other settings on it as usual.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use leader_runtime::ConfigBuilder;
    ///
    /// let config = ConfigBuilder::from_env()?.key_prefix("billing").build()?;
    /// # drop(config);
    /// # Ok::<(), leader_runtime::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] when none is set; [`Error::Config`] naming
    /// the variable when they contradict each other.
    pub fn from_env() -> Result<ConfigBuilder> {
        builder()
    }
}

/// [`builder`] over any lookup (tests pass a map).
pub(crate) fn builder_from(get: impl Fn(&str) -> Option<String>) -> Result<ConfigBuilder> {
    let get = |name: &str| get(name).filter(|v| !v.trim().is_empty());
    let url = get(URL);
    let cluster = get(CLUSTER_URLS);
    let master = get(SENTINEL_MASTER);
    let sentinels = get(SENTINEL_URLS);
    let user = get(SENTINEL_MASTER_USER);
    let password = get(SENTINEL_MASTER_PASSWORD);
    let sentinel = master.is_some() || sentinels.is_some();
    let set: Vec<&str> = [
        (url.is_some(), URL),
        (cluster.is_some(), CLUSTER_URLS),
        (sentinel, "LEADER_REDIS_SENTINEL_*"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect();
    if set.len() > 1 {
        return Err(env_err(
            URL,
            format!(
                "describes one deployment: set only one of {}",
                set.join(", ")
            ),
        ));
    }
    if !sentinel && (user.is_some() || password.is_some()) {
        let name = if user.is_some() {
            SENTINEL_MASTER_USER
        } else {
            SENTINEL_MASTER_PASSWORD
        };
        return Err(env_err(
            name,
            format!("is for Sentinel: set {SENTINEL_MASTER} and {SENTINEL_URLS} too"),
        ));
    }
    let builder = Config::builder();
    if let Some(url) = url {
        return Ok(builder.redis_url(url.trim()));
    }
    if let Some(urls) = cluster {
        return Ok(builder.redis_cluster_urls(split(&urls)));
    }
    if sentinel {
        let (Some(master), Some(urls)) = (master, sentinels) else {
            return Err(env_err(
                SENTINEL_URLS,
                format!("and {SENTINEL_MASTER} go together: set both, or neither"),
            ));
        };
        let builder = builder.redis_sentinel(master.trim(), split(&urls));
        return match (user, password) {
            (user, Some(password)) => {
                Ok(builder.sentinel_master_auth(user.unwrap_or_default(), password))
            }
            (Some(_), None) => Err(env_err(
                SENTINEL_MASTER_USER,
                format!("needs {SENTINEL_MASTER_PASSWORD} too"),
            )),
            (None, None) => Ok(builder),
        };
    }
    match get(FALLBACK_URL) {
        Some(url) => Ok(builder.redis_url(url.trim())),
        None => Err(Error::NotConfigured),
    }
}

/// URLs separated by commas (and/or whitespace).
fn split(urls: &str) -> Vec<String> {
    urls.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect()
}

fn env_err(name: &'static str, rule: String) -> Error {
    Error::Config { field: name, rule }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<Config> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        builder_from(|name| vars.get(name).cloned())?.build()
    }

    fn backend(vars: &[(&str, &str)]) -> String {
        match from(vars) {
            Ok(config) => format!("{config:?}"),
            Err(e) => panic!("{vars:?}: {e}"),
        }
    }

    fn error(vars: &[(&str, &str)]) -> (&'static str, String) {
        match from(vars) {
            Err(Error::Config { field, rule }) => (field, rule),
            other => panic!("{vars:?}: expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn nothing_set_is_not_configured() {
        assert!(matches!(from(&[]), Err(Error::NotConfigured)));
        assert!(matches!(from(&[(URL, "  ")]), Err(Error::NotConfigured)));
    }

    #[test]
    fn one_server() {
        assert!(backend(&[(URL, "redis://a:1")]).contains("\"redis://a:1\""));
        assert!(backend(&[(FALLBACK_URL, "redis://b:2")]).contains("\"redis://b:2\""));
        // LEADER_ wins over the generic variable a platform may set.
        let both = backend(&[(URL, "redis://a:1"), (FALLBACK_URL, "redis://b:2")]);
        assert!(
            both.contains("redis://a:1") && !both.contains("b:2"),
            "{both}"
        );
    }

    #[test]
    fn cluster() {
        let shown = backend(&[(CLUSTER_URLS, "redis://a:1, redis://b:2,redis://c:3")]);
        assert!(
            shown.contains("redis cluster [redis://a:1, redis://b:2, redis://c:3]"),
            "{shown}"
        );
        let shown = backend(&[(CLUSTER_URLS, "redis://a:1"), (FALLBACK_URL, "redis://b:2")]);
        assert!(shown.contains("redis cluster"), "{shown}");
    }

    #[test]
    fn sentinel() {
        let shown = backend(&[
            (SENTINEL_MASTER, "mymaster"),
            (SENTINEL_URLS, "redis://s1:26379,redis://s2:26379"),
        ]);
        assert!(
            shown.contains(r#"redis sentinel \"mymaster\" [redis://s1:26379, redis://s2:26379]"#),
            "{shown}"
        );
        let shown = backend(&[
            (SENTINEL_MASTER, "mymaster"),
            (SENTINEL_URLS, "redis://:sentinel-pw@s1:26379"),
            (SENTINEL_MASTER_USER, "app"),
            (SENTINEL_MASTER_PASSWORD, "master-pw"),
        ]);
        assert!(
            shown.contains(r#"master user \"app\", password ***"#),
            "{shown}"
        );
        assert!(
            !shown.contains("master-pw") && !shown.contains("sentinel-pw"),
            "{shown}"
        );
        let shown = backend(&[
            (SENTINEL_MASTER, "mymaster"),
            (SENTINEL_URLS, "redis://s1:26379"),
            (SENTINEL_MASTER_PASSWORD, "master-pw"),
        ]);
        assert!(shown.contains("(master password ***)"), "{shown}");
    }

    #[test]
    fn mistakes_are_named() {
        let (field, rule) = error(&[(URL, "redis://a:1"), (CLUSTER_URLS, "redis://b:2")]);
        assert_eq!(field, URL);
        assert!(rule.contains(CLUSTER_URLS), "{rule}");
        let (field, _) = error(&[(SENTINEL_MASTER, "mymaster")]);
        assert_eq!(field, SENTINEL_URLS);
        let (field, _) = error(&[(SENTINEL_URLS, "redis://s1:26379")]);
        assert_eq!(field, SENTINEL_URLS);
        let (field, _) = error(&[(URL, "redis://a:1"), (SENTINEL_MASTER_PASSWORD, "pw")]);
        assert_eq!(field, SENTINEL_MASTER_PASSWORD);
        let (field, rule) = error(&[
            (SENTINEL_MASTER, "mymaster"),
            (SENTINEL_URLS, "redis://s1:26379"),
            (SENTINEL_MASTER_USER, "app"),
        ]);
        assert_eq!(field, SENTINEL_MASTER_USER);
        assert!(rule.contains(SENTINEL_MASTER_PASSWORD), "{rule}");
        let (field, rule) = error(&[(URL, "redis://u:p/s3cret@h:1")]);
        assert_eq!(field, "redis_url");
        assert!(!rule.contains("s3cret"), "{rule}");
    }
}
