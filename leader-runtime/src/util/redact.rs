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
            // An `@` after a `?` or `#` that reads as a query (a path
            // before it, or a `name=value` after it: `?password=a@b`) may
            // be the query's as well as the user info's: which is not
            // knowable, so nothing after the `://` is shown.
            if let Some((before, after)) = userinfo.split_once(['?', '#']) {
                if before.contains('/') || after.contains('=') {
                    out.push_str("***");
                    return out;
                }
            }
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
    push_host_and_query(rest, &mut out);
    out
}

/// What follows a URL's user info (or its `://`): the host and path as
/// they are, the query's credentials redacted.
fn push_host_and_query(rest: &str, out: &mut String) {
    match rest.split_once('?') {
        None => out.push_str(rest),
        Some((before, query)) => {
            out.push_str(before);
            out.push('?');
            redact_query(query, out);
        }
    }
}

/// Free text (an error message) with every URL in it redacted, and no byte
/// of any user info password shown, whatever the password holds (spaces,
/// commas, `@`, `/`, `:`, `%`, `://`).
///
/// When the text reads surely as ordinary URLs — each `@` after the first
/// `://` ends the user info of a URL that starts at the beginning of a word
/// (or after `,;([{<"'=`), user info made of letters, digits and
/// `-._~%!$&*+=` with at most one `:`, and every URL before the last `@`
/// has such a user info — each URL is redacted as [`redact_url`] does (it
/// runs from its scheme to the next space or the next such URL), so each
/// host stays readable. Otherwise a password may hold a space, a comma or
/// another URL, and everything from the first `://` to the last `@` is
/// hidden (only a plain user name before its first `:` is shown).
pub(crate) fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let starts = url_starts(text);
    let Some(first) = starts.first() else {
        return text.to_owned();
    };
    let after = first.sep + 3;
    let last_at = text[after..].rfind('@').map(|i| after + i);
    let Some(last_at) = last_at.filter(|_| !per_url_reading_is_sure(text, &starts)) else {
        redact_each_url(text, &starts, 0, &mut out);
        return out;
    };
    // No URL before the first `://`.
    out.push_str(&text[..after]);
    let userinfo = &text[after..last_at];
    match userinfo.split_once(':') {
        Some((user, _)) if user.chars().all(is_user_name_char) => {
            out.push_str(user);
            out.push_str(":***");
        }
        _ => out.push_str("***"),
    }
    let end = unit_end(text, &starts, last_at);
    // After a `?` or `#`, the `@` may be inside a query's credential: what
    // follows it in the URL is hidden too.
    if !userinfo.contains(['?', '#']) {
        push_host_and_query(&text[last_at..end], &mut out);
    }
    redact_each_url(text, &starts, end, &mut out);
    out
}

/// Whether `text` may be redacted URL by URL (see [`redact_text`]).
fn per_url_reading_is_sure(text: &str, starts: &[UrlStart]) -> bool {
    let Some(first) = starts.first() else {
        return true;
    };
    let after = first.sep + 3;
    let Some(last_at) = text[after..].rfind('@').map(|i| after + i) else {
        return true;
    };
    let mut claimed = Vec::new();
    for start in starts.iter().take_while(|s| s.sep < last_at) {
        if !start.at_boundary(text) {
            return false;
        }
        let rest = &text[start.sep + 3..];
        let run = rest
            .find(|c: char| !(is_userinfo_char(c) || c == ':'))
            .unwrap_or(rest.len());
        if !rest[run..].starts_with('@') || rest[..run].matches(':').count() > 1 {
            return false;
        }
        claimed.push(start.sep + 3 + run);
    }
    // Both in order: every `@` is claimed.
    text[after..]
        .match_indices('@')
        .map(|(i, _)| after + i)
        .eq(claimed)
}

/// [`per_url_reading_is_sure`] of a whole text.
pub(crate) fn is_plain_url_list(text: &str) -> bool {
    per_url_reading_is_sure(text, &url_starts(text))
}

/// Where a URL's `://` is, and where its scheme (letters, digits, `+.-`
/// before it) begins.
struct UrlStart {
    scheme: usize,
    sep: usize,
}

impl UrlStart {
    /// A scheme that begins with a letter, at the beginning of the text or
    /// after a space or an opening or separating character.
    fn at_boundary(&self, text: &str) -> bool {
        text[self.scheme..].starts_with(|c: char| c.is_ascii_alphabetic())
            && text[..self.scheme].chars().next_back().is_none_or(|c| {
                c.is_whitespace()
                    || matches!(c, ',' | ';' | '(' | '[' | '{' | '<' | '"' | '\'' | '=')
            })
    }
}

/// Every `://` of `text`, in order.
fn url_starts(text: &str) -> Vec<UrlStart> {
    text.match_indices("://")
        .map(|(sep, _)| {
            let scheme = text[..sep]
                .char_indices()
                .rev()
                .take_while(|&(_, c)| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
                .last()
                .map_or(sep, |(i, _)| i);
            UrlStart { scheme, sep }
        })
        .collect()
}

/// A character of an ordinary user info, besides `:`.
fn is_userinfo_char(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            '-' | '.' | '_' | '~' | '%' | '!' | '$' | '&' | '*' | '+' | '='
        )
}

/// A character of a user name that is shown.
fn is_user_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~' | '%' | '+')
}

/// The end of the URL text that goes on at `from`: the next space, or the
/// scheme of the next URL (of `starts`) that starts at a boundary.
fn unit_end(text: &str, starts: &[UrlStart], from: usize) -> usize {
    let next = starts
        .iter()
        .skip_while(|s| s.scheme <= from)
        .find(|s| s.at_boundary(text))
        .map_or(text.len(), |s| s.scheme);
    text[from..next]
        .find(char::is_whitespace)
        .map_or(next, |i| from + i)
}

/// `text[from..]` into `out`, each URL in it (from its scheme to
/// [`unit_end`]) redacted by [`redact_url`].
fn redact_each_url(text: &str, starts: &[UrlStart], from: usize, out: &mut String) {
    let mut pos = from;
    for (i, start) in starts.iter().enumerate() {
        if start.scheme < pos {
            continue;
        }
        out.push_str(&text[pos..start.scheme]);
        let end = unit_end(text, &starts[i + 1..], start.sep);
        out.push_str(&redact_url(&text[start.scheme..end]));
        pos = end;
    }
    out.push_str(&text[pos..]);
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

/// Passwords built from tricky pieces, for the tests here and in `env`.
#[cfg(test)]
pub(crate) mod tricky {
    /// The marks every generated password holds (first, middle, last): none
    /// of them may ever be shown.
    pub(crate) const MARKS: [&str; 3] = ["Qk7", "Jm5", "Zr4"];

    /// Separators and URL syntax a password may hold.
    const PARTS: &[&str] = &[
        ",", " ", ", ", "\t", "@", "/", ":", "%", "%2C", "%40", "?", "#", "&", "=", "://",
        "redis://", "x://", "mid://", "@h", ";", "(",
    ];

    /// `Qk7{x}Jm5{y}Zr4` and `Qk7{x}{y}Zr4` for every pair of parts.
    pub(crate) fn passwords() -> Vec<String> {
        let mut out = Vec::new();
        for x in PARTS {
            for y in PARTS {
                out.push(format!("Qk7{x}Jm5{y}Zr4"));
                out.push(format!("Qk7{x}{y}Zr4"));
            }
        }
        out
    }

    /// Fails the test when `shown` holds a mark of `password`.
    #[track_caller]
    pub(crate) fn assert_hidden(password: &str, what: &str, shown: &str) {
        for mark in MARKS {
            assert!(
                !shown.contains(mark),
                "password {password:?} shown ({mark}) by {what}: {shown:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tricky::{assert_hidden, passwords};
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

    /// Every generated password, after any user name (or none), in URLs of
    /// every scheme, alone, in lists (commas, spaces, new lines) and in free
    /// text: neither `redact_text` nor (a single URL) `redact_url` shows a
    /// byte of it.
    #[test]
    fn no_password_byte_is_shown_for_any_input() {
        let hosts = ["h1:7000", "10.0.0.1:6379/2", "[::1]:26379"];
        for pw in passwords() {
            for scheme in ["redis", "rediss", "redis+sentinel"] {
                for (i, host) in hosts.iter().enumerate() {
                    let mut urls = vec![
                        format!("{scheme}://app:{pw}@{host}"),
                        format!("{scheme}://:{pw}@{host}"),
                        format!("{scheme}://u.ser-1:{pw}@{host}?protocol=resp3"),
                    ];
                    if !pw.contains(':') {
                        // A user info without `:` is a token.
                        urls.push(format!("{scheme}://{pw}@{host}"));
                    }
                    for url in &urls {
                        assert_hidden(&pw, "redact_url", &redact_url(url));
                        let other = format!("{scheme}://app:plain-pw@h{i}:7000");
                        let texts = [
                            url.clone(),
                            format!("connect to {url} failed: refused"),
                            format!("see ({url}), ok"),
                            format!("mail ops@example.com about {url} now"),
                            format!("{url},{scheme}://h2:7000"),
                            format!("{scheme}://h2:7000, {url}"),
                            format!("{url} {other}"),
                            format!("{other},{url}"),
                            format!("urls={url}\n{other}; retry"),
                            format!("bad value ({url},{url}): no"),
                        ];
                        for text in texts {
                            assert_hidden(
                                &pw,
                                &format!("redact_text({text:?})"),
                                &redact_text(&text),
                            );
                        }
                    }
                }
            }
        }
    }

    /// Two ordinary URLs with credentials, in a list or in free text, still
    /// show each host.
    #[test]
    fn ordinary_urls_with_credentials_keep_their_hosts() {
        assert_eq!(
            redact_text("redis://app:s3cret@h1:7000,redis://app:s3cret@h2:7000"),
            "redis://app:***@h1:7000,redis://app:***@h2:7000"
        );
        assert_eq!(
            redact_text("seeds (rediss://:s3cret@h1:1, rediss://:s3cret@h2:2) down"),
            "seeds (rediss://:***@h1:1, rediss://:***@h2:2) down"
        );
    }

    #[test]
    fn an_at_in_the_query_shows_no_password_byte() {
        for url in [
            "redis://host:6379/0?password=Qk7@Zr4",
            "redis://u:pw@host/0?pass=Qk7@Zr4",
            "rediss://host/?auth=Qk7@Zr4&db=1",
            "redis://h#frag=Qk7@Zr4",
        ] {
            let shown = redact_url(url);
            assert!(
                !shown.contains("Qk7") && !shown.contains("Zr4"),
                "{url} -> {shown}"
            );
            assert!(!shown.contains("pw"), "{url} -> {shown}");
        }
    }
}
