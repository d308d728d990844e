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
//!
//! The URL lists are cut at commas and spaces before each word that begins
//! a URL. Percent-encode a password that holds a comma, a space or `://`
//! there (`,` is `%2C`): a list that could be read as one URL whose password
//! holds such a cut is refused, and its messages never show a piece of it.

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
        let urls = split(CLUSTER_URLS, &urls)?;
        return Ok(builder
            .redis_cluster_urls(urls)
            .urls_from_variable(CLUSTER_URLS));
    }
    if sentinel {
        let (Some(master), Some(urls)) = (master, sentinels) else {
            return Err(env_err(
                SENTINEL_URLS,
                format!("and {SENTINEL_MASTER} go together: set both, or neither"),
            ));
        };
        let builder = builder
            .redis_sentinel(master.trim(), split(SENTINEL_URLS, &urls)?)
            .urls_from_variable(SENTINEL_URLS);
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

/// URLs separated by commas (and/or whitespace), from the variable `name`.
///
/// A cut is made only before a word that begins a URL (`scheme://`): a
/// password holding a comma or a space (but no `://` after it) stays in its
/// URL. A value cut into several URLs must read surely as such (each
/// URL with a plain user info, see `redact_text`): otherwise a cut may have
/// fallen inside a password, and it is refused, naming the value as
/// `redact_text` shows it (no piece cut out of it is ever shown).
fn split(name: &'static str, urls: &str) -> Result<Vec<String>> {
    let is_sep = |c: char| c == ',' || c.is_whitespace();
    let starts_url = |word: &str| {
        word.split_once("://").is_some_and(|(scheme, _)| {
            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        })
    };
    let mut out: Vec<String> = Vec::new();
    let mut rest = urls.trim_start_matches(is_sep);
    let mut gap = "";
    while !rest.is_empty() {
        let word_end = rest.find(is_sep).unwrap_or(rest.len());
        let (word, tail) = rest.split_at(word_end);
        match out.last_mut() {
            Some(last) if !starts_url(word) => {
                last.push_str(gap);
                last.push_str(word);
            }
            _ => out.push(word.to_owned()),
        }
        let gap_end = tail.find(|c: char| !is_sep(c)).unwrap_or(tail.len());
        (gap, rest) = tail.split_at(gap_end);
    }
    if out.len() > 1 && !crate::util::redact::is_plain_url_list(urls) {
        return Err(env_err(
            name,
            format!(
                "holds several URLs that cannot be told apart from a password holding a comma, \
                 a space or `://` ({}): give every URL the same user and password, \
                 percent-encoding any character other than letters, digits and `-._~` \
                 (`,` is %2C, a space %20, `@` %40, `/` %2F, `:` %3A)",
                crate::util::redact::redact_text(urls.trim())
            ),
        ));
    }
    Ok(out)
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

    /// Every generated password (commas, spaces, `@`, `/`, `:`, `%`, `://`
    /// in it), in the cluster and sentinel variables (alone, and in lists
    /// cut at commas and spaces) and in the builder methods: neither the
    /// error of the build nor the `Debug` of a built config shows a byte of
    /// it.
    #[test]
    fn no_password_byte_in_errors_or_debug_for_any_value() {
        use crate::util::redact::tricky::{assert_hidden, passwords};
        let shown = |pw: &str, what: &str, built: Result<Config>| match built {
            Ok(config) => assert_hidden(pw, what, &format!("{config:?}")),
            Err(e) => assert_hidden(pw, what, &format!("{e} {e:?}")),
        };
        for pw in passwords() {
            for scheme in ["redis", "rediss"] {
                let url = format!("{scheme}://app:{pw}@h1:7000");
                let same = format!("{scheme}://app:{pw}@h2:7000");
                let lists = [
                    url.clone(),
                    format!("{url},{scheme}://h2:7000"),
                    format!("{scheme}://h2:7000, {url}"),
                    format!("{url} {same}"),
                    format!("{url},{same}"),
                ];
                for list in &lists {
                    let what = format!("{CLUSTER_URLS}={list:?}");
                    shown(&pw, &what, from(&[(CLUSTER_URLS, list)]));
                    let what = format!("{SENTINEL_URLS}={list:?}");
                    let vars = [(SENTINEL_MASTER, "m"), (SENTINEL_URLS, list.as_str())];
                    shown(&pw, &what, from(&vars));
                }
                let pieces = [url.clone(), format!("{scheme}://h2:7000")];
                let what = format!("redis_cluster_urls({pieces:?})");
                let built = Config::builder().redis_cluster_urls(&pieces).build();
                shown(&pw, &what, built);
                let what = format!("redis_sentinel({pieces:?})");
                let built = Config::builder().redis_sentinel("m", &pieces).build();
                shown(&pw, &what, built);
                let what = format!("redis_url({url:?})");
                shown(&pw, &what, Config::builder().redis_url(&url).build());
            }
        }
    }
}
