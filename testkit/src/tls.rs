//! Certificates for TLS tests, made by the `openssl` command-line tool: a
//! throw-away CA, a server certificate for `127.0.0.1`/`localhost` and a
//! client certificate, both signed by it.

use std::fs;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::rng::XorShift;

static TLS_SEQ: AtomicU32 = AtomicU32::new(0);

/// A CA, a server and a client certificate (EC P-256 keys, valid for two
/// days) in a temp dir that is removed on drop.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use leader_testkit::{free_port, RedisServer, TlsFiles};
///
/// let tls = TlsFiles::generate()?;
/// let tls_port = free_port()?;
/// let server = RedisServer::builder()
///     .args(tls.server_args(tls_port))
///     .start()
///     .await?;
/// let url = format!("rediss://127.0.0.1:{tls_port}");
/// let ca_pem = tls.ca_pem()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TlsFiles {
    dir: PathBuf,
}

impl TlsFiles {
    /// Generates a fresh CA and the certificates it signs.
    ///
    /// # Errors
    ///
    /// If `openssl` is missing or fails (its output is in the error).
    pub fn generate() -> io::Result<TlsFiles> {
        let seq = TLS_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("leader-testkit-tls-{}-{seq}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let files = TlsFiles { dir };
        let d = &files.dir;
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            d,
            &[
                &["req", "-x509"][..],
                &ec,
                &["-keyout", "ca.key", "-out", "ca.crt", "-days", "2"],
                &["-subj", "/CN=leader-testkit-ca"],
                &["-addext", "basicConstraints=critical,CA:TRUE"],
                &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            ]
            .concat(),
        )?;
        for (name, usage) in [("server", "serverAuth"), ("client", "clientAuth")] {
            let ext = format!(
                "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
                 keyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n"
            );
            fs::write(d.join(format!("{name}.ext")), ext)?;
            let (key, csr, crt, ext) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
                format!("{name}.ext"),
            );
            let subject = format!("/CN=leader-testkit-{name}");
            openssl(
                d,
                &[
                    &["req"][..],
                    &ec,
                    &["-keyout", &key, "-out", &csr, "-subj", &subject],
                ]
                .concat(),
            )?;
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-out",
                    &crt,
                    "-days",
                    "2",
                    "-extfile",
                    &ext,
                ],
            )?;
        }
        Ok(files)
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the CA certificate (PEM).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// Path of the server certificate (PEM), for `127.0.0.1` and `localhost`.
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.crt")
    }

    /// Path of the server's private key (PEM).
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// Path of the client certificate (PEM).
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.crt")
    }

    /// Path of the client's private key (PEM).
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    /// The CA certificate's PEM bytes.
    ///
    /// # Errors
    ///
    /// If the file cannot be read.
    pub fn ca_pem(&self) -> io::Result<Vec<u8>> {
        fs::read(self.ca_cert())
    }

    /// `redis-server` arguments that serve TLS on `tls_port` with the server
    /// certificate, without requiring client certificates (append
    /// `--tls-auth-clients yes` to require them). The plain port stays open:
    /// the harness checks readiness on it.
    pub fn server_args(&self, tls_port: u16) -> Vec<String> {
        let path = |p: PathBuf| p.display().to_string();
        vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path(self.server_cert()),
            "--tls-key-file".into(),
            path(self.server_key()),
            "--tls-ca-cert-file".into(),
            path(self.ca_cert()),
            "--tls-auth-clients".into(),
            "no".into(),
        ]
    }
}

impl Drop for TlsFiles {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run openssl: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "openssl {args:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// A loopback port that was free just now, from the same range as
/// [`RedisServer`](crate::RedisServer)'s (below the ephemeral range), for a
/// second listener of a server such as `--tls-port`.
///
/// # Errors
///
/// If no free port is found in 100 tries.
pub fn free_port() -> io::Result<u16> {
    let mut rng = XorShift::seeded();
    let mut last = None;
    for _ in 0..100 {
        let port = 20_000 + (rng.next_u64() % 12_000) as u16;
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            Ok(_) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free port")))
}
