//! The scheduler's small HTTP endpoints (`/metrics`, the dashboard), served
//! by hyper's HTTP/1.1 server: request heads of at most 8 KiB read within
//! 5 s (longer ones are refused by hyper with 431 and the connection
//! closed), at most 256 connections at once, bodies never read, one handler per endpoint that sees the
//! method, path, query and headers, and an optional bearer token.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderMap, HeaderValue, CACHE_CONTROL, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::Arc;
use std::time::Duration;

/// The most bytes of a request head the endpoint reads (hyper's buffer;
/// 8 KiB is its smallest).
const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// How long a client may take to send its request head.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The most connections served at once; later ones wait to be accepted.
const MAX_CONNECTIONS: usize = 256;

/// What a handler sees of a request.
pub(super) struct Request {
    pub method: String,
    /// The path without the query.
    pub path: String,
    pub query: String,
    headers: HeaderMap,
}

impl Request {
    /// A request from its parts (tests, and the server below).
    pub fn new(method: &str, target: &str, headers: HeaderMap) -> Request {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Request {
            method: method.to_string(),
            path: path.to_string(),
            query: query.to_string(),
            headers,
        }
    }

    /// A GET of `target` with `headers` (name, value) (tests).
    #[cfg(test)]
    pub fn get(target: &str, headers: &[(&'static str, &str)]) -> Request {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(*k, HeaderValue::from_str(v).expect("a header value"));
        }
        Request::new("GET", target, h)
    }

    /// The value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Query parameter `key`, percent-decoded (`+` is a space).
    pub fn param(&self, key: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    }

    /// The token of its `Authorization: Bearer <token>` header, if any.
    pub fn bearer(&self) -> Option<&str> {
        crate::auth::bearer(self.header("authorization"))
    }

    /// True when `access` lets it read the HTTP endpoints (no credential
    /// needed, the shared users' token, or a reader's or admin's).
    pub fn authorized(&self, access: &crate::auth::Access) -> bool {
        access.may_read_http(self.bearer())
    }
}

/// An answer: status, content type, body.
pub(super) struct Response {
    pub code: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(code: u16, body: impl Into<String>) -> Response {
        Response {
            code,
            content_type: "text/plain; charset=utf-8",
            body: body.into().into_bytes(),
        }
    }

    pub fn json(v: &serde_json::Value) -> Response {
        Response {
            code: 200,
            content_type: "application/json",
            body: v.to_string().into_bytes(),
        }
    }

    /// 401, naming what is needed.
    pub fn unauthorized() -> Response {
        Response::text(
            401,
            "this scheduler needs the users' token: Authorization: Bearer <token>\n",
        )
    }

    /// The response hyper sends.
    fn into_hyper(self) -> hyper::Response<Full<Bytes>> {
        let mut r = hyper::Response::new(Full::new(Bytes::from(self.body)));
        *r.status_mut() = hyper::StatusCode::from_u16(self.code)
            .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
        let h = r.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if self.code == 401 {
            h.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

pub(super) type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// Binds `addr` (the `[runtime]` key `key` names it) and serves `handler`
/// there on `rt` until the runtime stops; the address bound.
/// TLS for an HTTP endpoint: the scheduler's certificate and key, as its
/// gRPC API serves them (`[runtime] tls_cert`, `tls_key`).
#[derive(Clone, Default)]
pub(super) struct HttpTls(#[cfg(feature = "tls")] Option<tokio_rustls::TlsAcceptor>);

impl HttpTls {
    /// From the scheduler's security settings: TLS when it has a
    /// certificate and key, plain HTTP otherwise.
    pub(super) fn of(security: &crate::net::Security) -> Result<HttpTls, crate::net::NetError> {
        #[cfg(feature = "tls")]
        {
            use tokio_rustls::rustls::pki_types::pem::PemObject;
            use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
            let Some((cert, key)) = security
                .tls
                .as_ref()
                .and_then(|t| Some((t.cert.as_ref()?, t.key.as_ref()?)))
            else {
                return Ok(HttpTls(None));
            };
            let bad = |what: &std::path::Path, e: String| crate::net::NetError::File {
                path: what.display().to_string(),
                message: e,
            };
            let certs = CertificateDer::pem_file_iter(cert)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| bad(cert, e.to_string()))?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, e.to_string()))?;
            let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
            let cfg = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
                .map_err(|e| crate::net::NetError::Tls(format!("HTTPS endpoints: {e}")))?;
            Ok(HttpTls(Some(tokio_rustls::TlsAcceptor::from(Arc::new(
                cfg,
            )))))
        }
        #[cfg(not(feature = "tls"))]
        {
            let _ = security;
            Ok(HttpTls())
        }
    }
}

pub(super) fn listen(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    key: &str,
    handler: Handler,
    tls: HttpTls,
) -> Result<std::net::SocketAddr, crate::net::NetError> {
    let failed = |message: String| crate::net::NetError::Listen {
        addr: addr.to_string(),
        message,
    };
    let l = rt
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(|e| failed(format!("[runtime] {key}: {e}")))?;
    let bound = l.local_addr().map_err(|e| failed(e.to_string()))?;
    rt.spawn(serve(l, handler, tls));
    Ok(bound)
}

/// Serves `listener` until the runtime stops: each connection (after its
/// TLS handshake, with TLS) by hyper's HTTP/1.1 server, each request
/// answered by `handler`.
async fn serve(listener: tokio::net::TcpListener, handler: Handler, tls: HttpTls) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let Ok((conn, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let handler = handler.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            #[cfg(feature = "tls")]
            if let Some(acceptor) = &tls.0 {
                // The handshake within the request timeout, or nothing.
                if let Ok(Ok(s)) =
                    tokio::time::timeout(REQUEST_TIMEOUT, acceptor.accept(conn)).await
                {
                    answer(s, handler).await;
                }
                drop(slot);
                return;
            }
            let _ = &tls;
            answer(conn, handler).await;
            drop(slot);
        });
    }
}

/// One connection's request, answered by `handler`.
async fn answer<S>(conn: S, handler: Handler)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
        let target = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let (parts, _body) = req.into_parts();
        let r = Request::new(parts.method.as_str(), &target, parts.headers);
        let reply = handler(&r).into_hyper();
        async move { Ok::<_, std::convert::Infallible>(reply) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_TIMEOUT)
        .max_buf_size(MAX_REQUEST_BYTES)
        .keep_alive(false)
        .serve_connection(TokioIo::new(conn), service)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_give_their_path_query_headers_and_token() {
        let r = Request::get(
            "/api/status?phase=running%2Cqueued&q=res+net&x",
            &[("host", "h"), ("authorization", "Bearer s3cret")],
        );
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/api/status"));
        assert_eq!(r.param("phase").as_deref(), Some("running,queued"));
        assert_eq!(r.param("q").as_deref(), Some("res net"));
        assert_eq!(r.param("x").as_deref(), Some(""));
        assert_eq!(r.param("y"), None);
        assert_eq!(r.header("Authorization"), Some("Bearer s3cret"));
        use crate::auth::Access;
        let shared = |t: &str| Access::Shared(std::sync::Arc::from(t));
        assert!(r.authorized(&shared("s3cret")) && r.authorized(&Access::Open));
        assert!(!r.authorized(&shared("other")));
        assert!(!Request::get("/", &[]).authorized(&shared("t")));
    }
}
