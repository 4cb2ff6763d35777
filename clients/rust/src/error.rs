//! One error type for every operation of the client.

use std::fmt;

/// What went wrong in a call to dlock.
///
/// Server errors keep their code (`NOTOWNER`, `DEADLOCK`, `WRONGTYPE`, ...):
/// the common ones have a variant of their own, every other one arrives as
/// [`Error::Server`]. [`Error::code`] gives the code of any of them.
///
/// ```no_run
/// # async fn demo() -> Result<(), dlock_client::Error> {
/// use std::time::Duration;
/// let dlock = dlock_client::Client::open("redis://127.0.0.1:6379/").await?;
/// match dlock.lock("orders:42").wait(Duration::from_millis(100)).acquire().await {
///     Ok(guard) => guard.release().await?,
///     Err(dlock_client::Error::Busy) => println!("someone else has it"),
///     Err(other) => return Err(other),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The lock was not granted: it is held (or queued for) by others and the
    /// wait, if any, ran out.
    Busy,
    /// The grant reached fewer replicas than asked for with `replicas(n, ..)`
    /// within the timeout; the lock was released again.
    NotReplicated {
        /// Replicas asked for.
        wanted: u32,
        /// Replicas that acknowledged the grant in time.
        acked: u32,
    },
    /// `NOTOWNER`: the owner holds no live hold of the lock (released,
    /// expired, deleted or held by someone else).
    NotOwner(String),
    /// `DEADLOCK`: a second owner asked to upgrade a shared hold while another
    /// upgrade waits on the same key.
    Deadlock(String),
    /// `WRONGTYPE`: the key holds another type (a latch where a lock was
    /// expected, a string, ...).
    WrongType(String),
    /// Any other error reply of the server, with its code (`ERR`, `READONLY`,
    /// `CROSSSLOT`, `NOPERM`, ...) and message.
    Server {
        /// The first word of the error reply.
        code: String,
        /// The rest of the error reply.
        message: String,
    },
    /// No reply within the wait plus the client's margin (the server is
    /// unreachable or stalled).
    Timeout,
    /// The guard was lost (docs/clients.md, R3): a renewal found the lock
    /// gone or held under another token, or no renewal succeeded before the
    /// guard's local deadline. Every operation on a lost guard but
    /// [`Guard::release`](crate::Guard::release) fails with it.
    Lost,
    /// Connecting, reading or writing failed, or another error of the
    /// `redis` crate.
    Connection(redis::RedisError),
    /// A reply of a shape the command never sends (a server without dlock,
    /// or a different version of it).
    UnexpectedReply(String),
    /// An argument the server would refuse (an empty key list, a zero
    /// lease, ...), caught before sending anything.
    InvalidArgument(String),
}

impl Error {
    /// The server's error code (`NOTOWNER`, `DEADLOCK`, `WRONGTYPE`, `ERR`,
    /// ...), or `None` for an error that did not come from a server reply.
    ///
    /// ```
    /// let error = dlock_client::Error::NotOwner("the lock is not held".into());
    /// assert_eq!(error.code(), Some("NOTOWNER"));
    /// assert_eq!(dlock_client::Error::Busy.code(), None);
    /// ```
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::NotOwner(_) => Some("NOTOWNER"),
            Error::Deadlock(_) => Some("DEADLOCK"),
            Error::WrongType(_) => Some("WRONGTYPE"),
            Error::Server { code, .. } => Some(code),
            Error::Connection(error) => error.code(),
            _ => None,
        }
    }

    /// Whether the error came from the connection (connect, I/O, timeout)
    /// rather than from a reply: the same call may succeed once the server is
    /// reachable again.
    ///
    /// ```
    /// assert!(dlock_client::Error::Timeout.is_connection_error());
    /// assert!(!dlock_client::Error::Busy.is_connection_error());
    /// ```
    pub fn is_connection_error(&self) -> bool {
        match self {
            Error::Timeout => true,
            Error::Connection(error) => {
                error.is_io_error()
                    || error.is_timeout()
                    || error.is_connection_dropped()
                    || error.is_connection_refusal()
            }
            _ => false,
        }
    }

    /// An error reply of the server, sorted by its code.
    pub(crate) fn from_server(code: &str, message: &str) -> Error {
        match code {
            "NOTOWNER" => Error::NotOwner(message.to_string()),
            "DEADLOCK" => Error::Deadlock(message.to_string()),
            "WRONGTYPE" => Error::WrongType(message.to_string()),
            _ => Error::Server {
                code: code.to_string(),
                message: message.to_string(),
            },
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(error: redis::RedisError) -> Error {
        let is_reply = !error.is_io_error()
            && !error.is_timeout()
            && !error.is_connection_dropped()
            && !error.is_connection_refusal();
        match (is_reply, error.code()) {
            (true, Some(code)) => Error::from_server(code, error.detail().unwrap_or("")),
            _ => Error::Connection(error),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Busy => write!(f, "the lock was not granted in time"),
            Error::NotReplicated { wanted, acked } => write!(
                f,
                "the grant reached {acked} of {wanted} replicas in time; the lock was released"
            ),
            Error::NotOwner(message) => write!(f, "NOTOWNER {message}"),
            Error::Deadlock(message) => write!(f, "DEADLOCK {message}"),
            Error::WrongType(message) => write!(f, "WRONGTYPE {message}"),
            Error::Server { code, message } => write!(f, "{code} {message}"),
            Error::Timeout => write!(f, "no reply from the server in time"),
            Error::Lost => write!(f, "the lock was lost: stop using its token"),
            Error::Connection(error) => write!(f, "connection error: {error}"),
            Error::UnexpectedReply(what) => write!(f, "unexpected reply: {what}"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Connection(error) => Some(error),
            _ => None,
        }
    }
}

/// The result of every fallible call of the client.
///
/// ```no_run
/// async fn take(dlock: &dlock_client::Client) -> dlock_client::Result<u64> {
///     let guard = dlock.lock("orders:42").acquire().await?;
///     let token = guard.token();
///     guard.release().await?;
///     Ok(token)
/// }
/// ```
pub type Result<T> = std::result::Result<T, Error>;
