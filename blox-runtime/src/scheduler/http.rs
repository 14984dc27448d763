//! The scheduler's small HTTP/1.1 endpoints (`/metrics`, the dashboard):
//! GET only, one request per connection, request heads up to 8 KiB read
//! within 5 s, an optional bearer token.

use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The most bytes of a request head the endpoint reads.
const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A request's first line and headers.
pub(super) struct Request<'a> {
    pub method: &'a str,
    /// The path without the query.
    pub path: &'a str,
    pub query: &'a str,
    headers: &'a str,
}

impl<'a> Request<'a> {
    pub fn parse(head: &'a str) -> Request<'a> {
        let (first, headers) = head.split_once("\r\n").unwrap_or((head, ""));
        let mut parts = first.split(' ');
        let method = parts.next().unwrap_or("");
        let target = parts.next().unwrap_or("");
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Request {
            method,
            path,
            query,
            headers,
        }
    }

    /// The value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers.split("\r\n").find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// Query parameter `key`, percent-decoded (`+` is a space).
    pub fn param(&self, key: &str) -> Option<String> {
        self.query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == key).then(|| percent_decode(v))
        })
    }

    /// True when no token is needed or the request carries it
    /// (`Authorization: Bearer <token>`).
    pub fn authorized(&self, token: Option<&str>) -> bool {
        let Some(want) = token else {
            return true;
        };
        let got = self
            .header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        got.is_some_and(|t| crate::net::constant_time_eq(t.as_bytes(), want.as_bytes()))
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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

    /// The bytes on the wire.
    pub fn bytes(&self) -> Vec<u8> {
        let reason = match self.code {
            200 => "OK",
            400 => "Bad Request",
            401 => "Unauthorized",
            404 => "Not Found",
            405 => "Method Not Allowed",
            _ => "Error",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n",
            self.code,
            self.content_type,
            self.body.len()
        );
        if self.code == 401 {
            out.push_str("WWW-Authenticate: Bearer\r\n");
        }
        out.push_str("\r\n");
        let mut out = out.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

pub(super) type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// Binds `addr` (the `[runtime]` key `key` names it) and serves `handler`
/// there on `rt` until the runtime stops; the address bound.
pub(super) fn listen(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    key: &str,
    handler: Handler,
) -> Result<std::net::SocketAddr, crate::net::NetError> {
    let failed = |message: String| crate::net::NetError::Listen {
        addr: addr.to_string(),
        message,
    };
    let l = rt
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(|e| failed(format!("[runtime] {key}: {e}")))?;
    let bound = l.local_addr().map_err(|e| failed(e.to_string()))?;
    rt.spawn(serve(l, handler));
    Ok(bound)
}

/// Serves `listener` until the runtime stops, answering each request with
/// `handler`.
async fn serve(listener: tokio::net::TcpListener, handler: Handler) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let head = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut conn)).await;
            let reply = match head {
                Ok(Some(head)) => handler(&Request::parse(&head)),
                Ok(None) => Response::text(400, "a request head of at most 8 KiB\n"),
                Err(_) => return,
            };
            let _ = conn.write_all(&reply.bytes()).await;
            let _ = conn.shutdown().await;
        });
    }
}

/// Reads a request head (up to the blank line); `None` if it is too long or
/// the connection closes first.
async fn read_head(conn: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() + n > MAX_REQUEST_BYTES {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8(buf).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_into_path_query_headers_and_token() {
        let r = Request::parse(
            "GET /api/status?phase=running%2Cqueued&q=res+net&x HTTP/1.1\r\nHost: h\r\nauthorization: Bearer s3cret\r\n\r\n",
        );
        assert_eq!((r.method, r.path), ("GET", "/api/status"));
        assert_eq!(r.param("phase").as_deref(), Some("running,queued"));
        assert_eq!(r.param("q").as_deref(), Some("res net"));
        assert_eq!(r.param("x").as_deref(), Some(""));
        assert_eq!(r.param("y"), None);
        assert!(r.authorized(Some("s3cret")) && r.authorized(None));
        assert!(!r.authorized(Some("other")));
        assert!(!Request::parse("GET / HTTP/1.1\r\n\r\n").authorized(Some("t")));
        // Broken escapes are kept as they are.
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}
