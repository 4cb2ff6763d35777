//! A minimal RESP2 client: commands are queued into one write buffer
//! (pipelining is just queueing several before `flush`), replies are parsed
//! from one read buffer. Byte-level control matters here: load generators
//! must cost the client as little as possible, blocked waiters are sockets
//! that are written once and never read, and pub/sub waiters wait on a
//! socket with a timeout.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};
use std::time::Duration;

use crate::Res;

/// One reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Status(String),
    Error(String),
    Array(Vec<Reply>),
}

impl Reply {
    pub fn is_nil(&self) -> bool {
        matches!(self, Reply::Nil)
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(value) => Some(*value),
            _ => None,
        }
    }

    /// A bulk or status reply as text.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Reply::Bulk(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            Reply::Status(text) => Some(text.clone()),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(items) => Some(items),
            _ => None,
        }
    }

    /// True for a DLOCK grant `[token, holds, owner]`.
    pub fn is_grant(&self) -> bool {
        matches!(
            self.as_array(),
            Some([Reply::Int(_), Reply::Int(_), Reply::Bulk(_)])
        )
    }

    pub fn is_ok(&self) -> bool {
        matches!(self, Reply::Status(text) if text == "OK")
    }
}

/// Encodes one command as a RESP array of bulk strings.
pub fn encode<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for arg in args {
        let arg = arg.as_ref();
        out.push(b'$');
        out.extend_from_slice(arg.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// A connection to one server.
pub struct Conn {
    stream: TcpStream,
    /// Read buffer: `input[start..end]` is received and not yet parsed.
    input: Vec<u8>,
    start: usize,
    end: usize,
    output: Vec<u8>,
}

/// The least free room a read is made with (buffers are allocated lazily:
/// 10,000 idle blocked waiters must cost little).
const READ_ROOM: usize = 16 * 1024;

impl Conn {
    pub fn connect(port: u16) -> io::Result<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            input: Vec::new(),
            start: 0,
            end: 0,
            output: Vec::new(),
        })
    }

    /// Queues a command (sent by the next `flush`).
    pub fn queue<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        encode(&mut self.output, args);
    }

    pub fn flush(&mut self) -> io::Result<()> {
        if !self.output.is_empty() {
            self.stream.write_all(&self.output)?;
            self.output.clear();
        }
        Ok(())
    }

    /// Reads the next reply (blocking).
    pub fn read(&mut self) -> io::Result<Reply> {
        loop {
            if let Some((reply, used)) = parse(&self.input[self.start..self.end])? {
                self.start += used;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                }
                return Ok(reply);
            }
            self.fill()?;
        }
    }

    /// Reads `n` replies.
    pub fn read_n(&mut self, n: usize) -> io::Result<Vec<Reply>> {
        (0..n).map(|_| self.read()).collect()
    }

    fn fill(&mut self) -> io::Result<()> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.input.len() - self.end < READ_ROOM {
            if self.start > 0 {
                self.input.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.input.len() - self.end < READ_ROOM {
                let size = (self.input.len() * 2).max(self.end + READ_ROOM);
                self.input.resize(size, 0);
            }
        }
        let n = self.stream.read(&mut self.input[self.end..])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed by the server",
            ));
        }
        self.end += n;
        Ok(())
    }

    /// Sends one command and reads its reply; error replies are `Err`.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Res<Reply> {
        self.queue(args);
        self.flush()?;
        match self.read()? {
            Reply::Error(message) => {
                Err(format!("{}: {message}", String::from_utf8_lossy(args[0].as_ref())).into())
            }
            reply => Ok(reply),
        }
    }

    /// Whether some input is already buffered or arrives within `timeout`
    /// (`None`: only what the socket has right now, without waiting).
    pub fn wait_readable(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        if self.start < self.end {
            return Ok(true);
        }
        match timeout {
            Some(timeout) if !timeout.is_zero() => self.stream.set_read_timeout(Some(timeout))?,
            _ => self.stream.set_nonblocking(true)?,
        }
        let outcome = self.fill();
        self.stream.set_read_timeout(None)?;
        self.stream.set_nonblocking(false)?;
        match outcome {
            Ok(()) => Ok(true),
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// The socket's descriptor (to register it with a `sys::Poller`).
    pub fn raw_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// Whether a reply is already buffered, or part of one (a poller only
    /// reports what is still in the socket).
    pub fn has_buffered(&self) -> bool {
        self.start < self.end
    }

    /// Closes the connection at once.
    pub fn close(self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

fn protocol_error(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("RESP: {what}"))
}

/// Parses one reply from the start of `data`: the reply and the bytes it
/// used, or `None` when `data` holds only part of it.
pub fn parse(data: &[u8]) -> io::Result<Option<(Reply, usize)>> {
    let Some(line_end) = find_crlf(data) else {
        return Ok(None);
    };
    if line_end == 0 {
        return Err(protocol_error("empty line"));
    }
    let line = &data[1..line_end];
    let after = line_end + 2;
    let text = || String::from_utf8_lossy(line).into_owned();
    let number = || -> io::Result<i64> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| protocol_error("bad number"))
    };
    match data[0] {
        b'+' => Ok(Some((Reply::Status(text()), after))),
        b'-' => Ok(Some((Reply::Error(text()), after))),
        b':' => Ok(Some((Reply::Int(number()?), after))),
        b'$' => {
            let len = number()?;
            if len < 0 {
                return Ok(Some((Reply::Nil, after)));
            }
            let end = after + len as usize;
            if data.len() < end + 2 {
                return Ok(None);
            }
            Ok(Some((Reply::Bulk(data[after..end].to_vec()), end + 2)))
        }
        b'*' => {
            let count = number()?;
            if count < 0 {
                return Ok(Some((Reply::Nil, after)));
            }
            let mut items = Vec::with_capacity(count as usize);
            let mut used = after;
            for _ in 0..count {
                match parse(&data[used..])? {
                    Some((item, n)) => {
                        items.push(item);
                        used += n;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(items), used)))
        }
        other => Err(protocol_error(&format!("unexpected type byte {other:#x}"))),
    }
}

fn find_crlf(data: &[u8]) -> Option<usize> {
    data.windows(2).position(|pair| pair == b"\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_type_and_partial_input() {
        let data = b"*3\r\n:7\r\n$3\r\nabc\r\n$-1\r\n+OK\r\n-ERR x\r\n";
        let (reply, used) = parse(data).unwrap().unwrap();
        assert_eq!(
            reply,
            Reply::Array(vec![
                Reply::Int(7),
                Reply::Bulk(b"abc".to_vec()),
                Reply::Nil
            ])
        );
        let (ok, n) = parse(&data[used..]).unwrap().unwrap();
        assert!(ok.is_ok());
        let (error, _) = parse(&data[used + n..]).unwrap().unwrap();
        assert_eq!(error, Reply::Error("ERR x".into()));
        for cut in 0..used {
            assert_eq!(parse(&data[..cut]).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn encodes_bulk_arrays() {
        let mut out = Vec::new();
        encode(&mut out, &["SET", "k", "v"]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
    }

    #[test]
    fn recognizes_grants() {
        let grant = Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(1),
            Reply::Bulk(b"o".to_vec()),
        ]);
        assert!(grant.is_grant());
        assert!(!Reply::Nil.is_grant());
    }
}
