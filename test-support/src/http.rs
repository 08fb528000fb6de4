//! A plain HTTP/1.1 exchange over a fresh connection, written by hand so that a test
//! sends exactly the bytes it means (a `Host` of its choosing, a body larger than the
//! server takes) and reads the answer as it came, chunked or not. Blocking, for the tests
//! that drive a server in another process, and async, for those whose server runs on the
//! test's own runtime.

/// An answer: its status, its headers (names in lower case, in the order sent) and its
/// body (de-chunked).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The request's head: `Host` is `address` unless `headers` name one, and the connection
/// closes after the answer.
fn head(address: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut text = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        text.push_str(&format!("Host: {address}\r\n"));
    }
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    text
}

/// The answer in `raw`, everything the server sent before it closed the connection.
fn answer(raw: &[u8]) -> Answer {
    let raw = String::from_utf8_lossy(raw);
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP answer: {raw:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    Answer {
        status,
        headers,
        body: if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    }
}

/// A chunked body's data (up to its last chunk, or as much as came).
pub fn dechunk(raw: &str) -> String {
    let mut raw = raw.as_bytes();
    let mut out = Vec::new();
    while let Some(end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&raw[..end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let rest = &raw[end + 2..];
        match size {
            Some(size) if size > 0 && rest.len() >= size => {
                out.extend_from_slice(&rest[..size]);
                raw = rest[size..].strip_prefix(b"\r\n").unwrap_or(&rest[size..]);
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One request to `url` (`http://host:port`), blocking until the server closes.
pub fn request(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    use std::io::{Read, Write};
    let address = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    stream
        .write_all(head(address, method, path, headers, body).as_bytes())
        .expect("send the head");
    // A server may answer (413) and close before the whole body is sent.
    let _ = stream.write_all(body.as_bytes());
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    answer(&raw)
}

/// One request to `address`, on the caller's runtime (the server may be a task of it).
pub async fn exchange(
    address: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let host = address.to_string();
    stream
        .write_all(head(&host, method, path, headers, body).as_bytes())
        .await
        .expect("send the head");
    let _ = stream.write_all(body.as_bytes()).await;
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw).await;
    answer(&raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_answer_is_read_as_its_data() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n5\r\nhello\r\n1\r\n!\r\n0\r\n\r\n";
        let answer = answer(raw);
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("x-a"), Some("1"));
        assert_eq!(answer.body, "hello!");
    }

    #[test]
    fn a_head_names_the_host_once() {
        let text = head("127.0.0.1:1", "GET", "/", &[("Host", "example")], "");
        assert_eq!(text.matches("Host:").count(), 1);
        assert!(text.contains("Host: example\r\n"));
    }
}
