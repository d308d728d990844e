//! Credentials out of URLs before they reach an error, `Debug` or a log.
//!
//! Every form the redis crate reads a credential from is covered: the user
//! info of `redis://user:password@host` (also when the password holds `/`,
//! `?`, `#` or `@`, unescaped or `%`-escaped — the redis crate then fails to
//! parse it, and the error text must still not show it), and the `user=` /
//! `pass=` query parameters of `redis+unix://` and `unix://` URLs (plus
//! `password=`, `username=` and `auth=`, which users write by mistake).

/// Query parameters whose value is a credential (compared case-insensitively,
/// after percent-decoding the key).
const SECRET_KEYS: &[&str] = &["pass", "password", "user", "username", "auth"];
/// Query parameters known to be harmless: they end a redacted value that
/// held an unescaped `&`.
const PLAIN_KEYS: &[&str] = &["db", "protocol"];

/// The URL with its credentials replaced by `***`: the password of the user
/// info (the user name stays, a user info without `:` is treated as a token),
/// and the values of credential query parameters. A string without `://` is
/// shown as `<unparseable url>`.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return "<unparseable url>".to_owned();
    };
    let (head, rest) = url.split_at(scheme_end + 3);
    let mut out = String::with_capacity(url.len());
    out.push_str(head);
    // A unix socket's rest that starts with `/` is a path
    // (`redis+unix:///path`): an `@` there is in the path or query. Any
    // other scheme's extra slashes are a typo (`redis:///u:pw@h`, which the
    // URL parser takes, the redis crate then refuses, and its error shows):
    // what follows them may still be a user info.
    let unix = url[..scheme_end].to_ascii_lowercase().contains("unix");
    let rest = if unix {
        rest
    } else {
        let after = rest.trim_start_matches('/');
        out.push_str(&rest[..rest.len() - after.len()]);
        after
    };
    // The user info ends at the *last* `@`: a password may hold `@`, `/`,
    // `?` or `#` unescaped (the URL parser then rejects the URL, and its
    // error must not show it either).
    let rest = match rest.rfind('@') {
        Some(at) if !rest.starts_with('/') => {
            let userinfo = &rest[..at];
            match userinfo.split_once(':') {
                Some((user, _)) => {
                    out.push_str(user);
                    out.push_str(":***");
                }
                None => out.push_str("***"),
            }
            &rest[at..]
        }
        _ => rest,
    };
    match rest.split_once('?') {
        None => out.push_str(rest),
        Some((before, query)) => {
            out.push_str(before);
            out.push('?');
            redact_query(query, &mut out);
        }
    }
    out
}

/// Free text (an error message) with every URL in it redacted as
/// [`redact_url`] does: each whitespace-separated word that contains `://`.
pub(crate) fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let word_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (word, tail) = rest.split_at(word_end);
        if word.contains("://") {
            out.push_str(&redact_url(word));
        } else {
            out.push_str(word);
        }
        let space_end = tail
            .find(|c: char| !c.is_whitespace())
            .unwrap_or(tail.len());
        out.push_str(&tail[..space_end]);
        rest = &tail[space_end..];
    }
    out
}

/// `query` (everything after `?`, fragment included) with the values of
/// credential parameters replaced by `***`. Parameters after a credential
/// that are not known to be harmless are taken as part of its value (an
/// unescaped `&` in a password), and so is a fragment.
fn redact_query(query: &str, out: &mut String) {
    let mut redacting = false;
    let mut first = true;
    for pair in query.split('&') {
        let (key, _) = pair.split_once('=').unwrap_or((pair, ""));
        let key_text = percent_decode(key);
        let is = |keys: &[&str]| keys.iter().any(|k| k.eq_ignore_ascii_case(&key_text));
        let shown = if is(SECRET_KEYS) {
            redacting = true;
            Some(format!("{key}=***"))
        } else if is(PLAIN_KEYS) && !pair.contains(['#', '@']) {
            redacting = false;
            Some(pair.to_owned())
        } else if redacting {
            None
        } else {
            Some(pair.to_owned())
        };
        if let Some(shown) = shown {
            if !first {
                out.push('&');
            }
            first = false;
            out.push_str(&shown);
        }
    }
}

/// `%XX` escapes decoded (invalid ones kept as they are), lossy UTF-8.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|&b| (b as char).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                // Two hex digits: at most 255.
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'%'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::{redact_text, redact_url};
    use crate::{Config, Error};

    const SECRET: &str = "s3cret";

    /// The URL is redacted to `want`, and neither the `Error::Config` text
    /// of a build nor the `Debug` of a built config shows the secret.
    #[track_caller]
    fn redacts(url: &str, want: &str) {
        let shown = redact_url(url);
        assert_eq!(shown, want, "redact_url({url:?})");
        assert!(!shown.contains(SECRET), "{shown}");
        match Config::builder().redis_url(url).build() {
            Ok(config) => {
                let debug = format!("{config:?}");
                assert!(!debug.contains(SECRET), "Debug of {url:?}: {debug}");
            }
            Err(e) => {
                let text = e.to_string();
                assert!(!text.contains(SECRET), "error for {url:?}: {text}");
                assert!(matches!(e, Error::Config { .. }), "{e:?}");
            }
        }
    }

    #[test]
    fn user_and_password() {
        redacts("redis://u:s3cret@h:1/0", "redis://u:***@h:1/0");
    }

    #[test]
    fn password_alone() {
        redacts("redis://:s3cret@h:1", "redis://:***@h:1");
    }

    #[test]
    fn user_info_without_colon() {
        redacts("redis://s3cret@h:1", "redis://***@h:1");
    }

    #[test]
    fn no_credentials() {
        redacts("redis://h:1/2", "redis://h:1/2");
        redacts(
            "redis+unix:///tmp/r.sock?db=2",
            "redis+unix:///tmp/r.sock?db=2",
        );
    }

    #[test]
    fn password_with_slash() {
        redacts("redis://u:ab/s3cret@h:1", "redis://u:***@h:1");
        redacts("redis://:s3cret/x@h:1/0", "redis://:***@h:1/0");
    }

    #[test]
    fn password_with_question_mark_or_hash() {
        redacts("redis://u:a?s3cret@h:1", "redis://u:***@h:1");
        redacts("rediss://u:a#s3cret@h:1", "rediss://u:***@h:1");
    }

    /// Extra slashes after the scheme (a typo the URL parser accepts, the
    /// redis crate refuses with an error that shows the URL).
    #[test]
    fn password_after_extra_slashes() {
        redacts("redis:///:s3cret@h:1", "redis:///:***@h:1");
        redacts("rediss:///u:s3cret@h:1", "rediss:///u:***@h:1");
        redacts("redis:////s3cret@h:1/0", "redis:////***@h:1/0");
        let text = redact_text("no route to redis:///u:s3cret@h");
        assert!(!text.contains(SECRET), "{text}");
    }

    #[test]
    fn password_with_at_sign() {
        redacts("redis://u:a@s3cret@h:1", "redis://u:***@h:1");
    }

    #[test]
    fn percent_escaped_password() {
        redacts("redis://u:s3cret%40x%2Fy@h:1", "redis://u:***@h:1");
        redacts("redis://u:%73%33%63ret@h:1", "redis://u:***@h:1");
    }

    #[test]
    fn unix_socket_pass_query() {
        redacts(
            "redis+unix:///tmp/r.sock?pass=s3cret",
            "redis+unix:///tmp/r.sock?pass=***",
        );
        redacts(
            "unix:///tmp/r.sock?db=1&pass=s3cret&protocol=resp3",
            "unix:///tmp/r.sock?db=1&pass=***&protocol=resp3",
        );
    }

    #[test]
    fn unix_socket_user_and_password_queries() {
        redacts(
            "redis+unix:///tmp/r.sock?user=s3cret-user&pass=s3cret",
            "redis+unix:///tmp/r.sock?user=***&pass=***",
        );
        redacts(
            "unix:///tmp/r.sock?password=s3cret",
            "unix:///tmp/r.sock?password=***",
        );
        redacts(
            "redis://h:1?username=s3cret&password=s3cret",
            "redis://h:1?username=***&password=***",
        );
    }

    #[test]
    fn escaped_query_keys_and_values() {
        // `p%61ss` is `pass` to the URL parser.
        redacts(
            "redis+unix:///tmp/r.sock?p%61ss=s3cret",
            "redis+unix:///tmp/r.sock?p%61ss=***",
        );
        redacts(
            "redis+unix:///tmp/r.sock?PASS=s3cret%26x",
            "redis+unix:///tmp/r.sock?PASS=***",
        );
    }

    #[test]
    fn query_password_with_separators() {
        // An unescaped `&`, `#` or `@` inside the value: everything up to the
        // next parameter known to be harmless counts as the password.
        redacts(
            "redis+unix:///tmp/r.sock?pass=a&s3cret&db=3",
            "redis+unix:///tmp/r.sock?pass=***&db=3",
        );
        redacts(
            "redis+unix:///tmp/r.sock?pass=a#s3cret",
            "redis+unix:///tmp/r.sock?pass=***",
        );
        redacts(
            "redis+unix:///tmp/r.sock?pass=a@s3cret",
            "redis+unix:///tmp/r.sock?pass=***",
        );
    }

    #[test]
    fn unparseable() {
        redacts("s3cret", "<unparseable url>");
        redacts("redis:/u:s3cret@h", "<unparseable url>");
    }

    #[test]
    fn urls_in_free_text() {
        let text = "connect to postgres://app:s3cret@db:5432/x failed;\n\tsee (redis://:s3cret@h:6379), ok";
        let shown = redact_text(text);
        assert!(!shown.contains(SECRET), "{shown}");
        assert_eq!(
            shown,
            "connect to postgres://app:***@db:5432/x failed;\n\tsee (redis://:***@h:6379), ok"
        );
        assert_eq!(redact_text("no url here  at all "), "no url here  at all ");
        assert_eq!(redact_text(""), "");
    }
}
