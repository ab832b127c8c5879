//! Mutual TLS to a remote engine, trusting only the CA its `tls_ca` names: bollard's own
//! TLS adds that CA to the system's roots, so any certificate a public CA signed for the
//! engine's name (or one a proxy's CA, installed system-wide, minted) would pass for the
//! engine, which is root on its host.

use std::path::Path;
use std::sync::Arc;

use bollard::{BollardRequest, ClientVersion, Docker};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

/// The roots a connection to the engine trusts: the certificates of `ca` and nothing else.
pub(crate) fn pinned_roots(ca: &Path) -> Result<RootCertStore, String> {
    let certs = read_certs(ca)?;
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!("{} holds no usable CA certificate", ca.display()));
    }
    Ok(roots)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read the certificates in {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The client side of the engine's mutual TLS: its pinned CA, our certificate and key.
pub(crate) fn client_config(ca: &Path, cert: &Path, key: &Path) -> Result<ClientConfig, String> {
    let roots = pinned_roots(ca)?;
    let chain = read_certs(cert)?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read the private key in {}: {e}", key.display()))?;
    // Both of rustls's providers are in the build (other crates enable the other), so the
    // one used here is named rather than left to a process-wide default.
    ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("the client certificate {} and its key do not go together: {e}", cert.display()))
}

/// A client for the engine at `addr` (`host:port`) over TLS with `config`.
pub(crate) fn connect(
    addr: &str,
    config: ClientConfig,
    timeout_secs: u64,
    version: &ClientVersion,
) -> Result<Docker, bollard::errors::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnector::from((http, config));
    let mut builder = Client::builder(TokioExecutor::new());
    builder.pool_max_idle_per_host(0);
    let client = Arc::new(builder.build(https));
    Docker::connect_with_custom_transport(
        move |req: BollardRequest| {
            let client = Arc::clone(&client);
            async move { client.request(req).await.map_err(bollard::errors::Error::from) }
        },
        Some(format!("https://{addr}")),
        timeout_secs,
        version,
    )
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::path::PathBuf;
    use std::process::Command;

    use super::*;

    fn openssl(dir: &Path, args: &str) {
        let ok = Command::new("sh")
            .arg("-c")
            .arg(format!("openssl {args} 2>/dev/null"))
            .current_dir(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "openssl {args}");
    }

    /// CA `name`, a server certificate for 127.0.0.1 it signed, and a client certificate.
    fn pki(dir: &Path, name: &str) {
        openssl(dir, &format!("req -x509 -newkey rsa:2048 -nodes -keyout {name}-ca-key.pem -out {name}-ca.pem -days 2 -subj /CN={name}-ca"));
        std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
        for who in ["server", "client"] {
            openssl(
                dir,
                &format!(
                    "req -newkey rsa:2048 -nodes -keyout {name}-{who}-key.pem -out {name}-{who}.csr -subj /CN={who}"
                ),
            );
            openssl(dir, &format!("x509 -req -in {name}-{who}.csr -CA {name}-ca.pem -CAkey {name}-ca-key.pem -CAcreateserial -out {name}-{who}.pem -days 2 -extfile san.ext"));
        }
    }

    /// A TLS server on 127.0.0.1 with `name`'s server certificate that answers one HTTP
    /// request with an engine's `/_ping`; the thread returns the bytes of the request it
    /// read (none when the handshake failed).
    fn server(dir: &Path, name: &str) -> (u16, std::thread::JoinHandle<Vec<u8>>) {
        let chain = read_certs(&dir.join(format!("{name}-server.pem"))).unwrap();
        let key = PrivateKeyDer::from_pem_file(dir.join(format!("{name}-server-key.pem"))).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let mut conn = rustls::ServerConnection::new(Arc::new(config)).unwrap();
            let mut tls = rustls::Stream::new(&mut conn, &mut sock);
            let mut got = vec![0u8; 4096];
            let n = match tls.read(&mut got) {
                Ok(n) => n,
                Err(_) => return Vec::new(),
            };
            got.truncate(n);
            let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nApi-Version: 1.41\r\n\r\nOK");
            let _ = tls.flush();
            got
        });
        (port, handle)
    }

    fn ping(dir: &Path, ca: &str, port: u16) -> Result<(), String> {
        let p = |f: &str| -> PathBuf { dir.join(f) };
        let config = client_config(&p(&format!("{ca}-ca.pem")), &p("a-client.pem"), &p("a-client-key.pem"))?;
        let docker = connect(&format!("127.0.0.1:{port}"), config, 10, bollard::API_DEFAULT_VERSION)
            .map_err(|e| e.to_string())?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(docker.ping()).map(|_| ()).map_err(|e| format!("{e:?}"))
    }

    #[test]
    fn an_engine_certificate_from_another_ca_is_refused_even_when_the_system_trusts_that_ca() {
        let dir = tempfile::tempdir().unwrap();
        pki(dir.path(), "a");
        pki(dir.path(), "b");
        // The system store trusts CA b (rustls-native-certs reads SSL_CERT_FILE): bollard's
        // own TLS would accept b's server certificate for an engine pinned to a.
        // SAFETY (edition 2021: set_var is safe, the note is for readers): no other test of
        // this crate reads SSL_CERT_FILE.
        std::env::set_var("SSL_CERT_FILE", dir.path().join("b-ca.pem"));
        assert_eq!(pinned_roots(&dir.path().join("a-ca.pem")).unwrap().len(), 1, "the pinned CA alone");

        let (port, seen) = server(dir.path(), "b");
        let err = ping(dir.path(), "a", port).unwrap_err();
        assert!(err.contains("UnknownIssuer") || err.contains("certificate"), "{err}");
        assert!(seen.join().unwrap().is_empty(), "the request must not reach an engine the pinned CA did not sign");

        // The honest case: the engine's certificate from the pinned CA.
        let (port, seen) = server(dir.path(), "b");
        ping(dir.path(), "b", port).unwrap();
        let request = String::from_utf8(seen.join().unwrap()).unwrap();
        assert!(request.starts_with("GET /_ping") || request.contains("/_ping"), "{request}");
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not a certificate\n").unwrap();
        let err = pinned_roots(&ca).unwrap_err();
        assert!(err.contains("ca.pem"), "{err}");
    }
}
