//! Connecting: one server (`--url`/`DLOCK_URL`), a Cluster (`--cluster`
//! seeds) or the master a Sentinel names; the password from the URL or
//! `REDISCLI_AUTH`; and error messages that say what failed and what to do.

use dlock_client::redis::{self, ConnectionInfo, IntoConnectionInfo};

use crate::args::Connection;
use crate::{code, Failure};

const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// Where the commands go, resolved (a Sentinel asked, a password added).
pub enum Target {
    /// One server (boxed: with TLS a ConnectionInfo is ~240 bytes).
    Standalone {
        info: Box<ConnectionInfo>,
        shown: String,
    },
    /// A Redis Cluster, through its seeds.
    Cluster {
        seeds: Vec<ConnectionInfo>,
        shown: String,
    },
}

impl Target {
    /// The server as the messages name it (no password).
    pub fn shown(&self) -> &str {
        match self {
            Target::Standalone { shown, .. } | Target::Cluster { shown, .. } => shown,
        }
    }
}

/// The URL without its password, for messages.
fn without_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let user = if user.is_empty() {
                String::new()
            } else {
                format!("{user}@")
            };
            format!("{}{}{}", &url[..scheme + 3], user, &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

/// Parses a URL and adds `REDISCLI_AUTH` when the URL has no password.
fn parse_url(url: &str, what: &str) -> Result<ConnectionInfo, Failure> {
    let info = url.into_connection_info().map_err(|error| {
        let detail = error.to_string();
        if url.starts_with("rediss://") || detail.contains("TLS") || detail.contains("tls") {
            Failure::new(
                code::UNAVAILABLE,
                format!(
                    "{what} {}: {detail}: this build of dlock cannot connect with TLS; use a redis:// URL or a build with TLS",
                    without_password(url)
                ),
            )
        } else {
            Failure::usage(format!(
                "{what} '{}' is not a server URL ({detail}): write it as redis://[user:password@]host:port/db",
                without_password(url)
            ))
        }
    })?;
    Ok(with_env_password(info))
}

fn with_env_password(info: ConnectionInfo) -> ConnectionInfo {
    if info.redis_settings().password().is_some() {
        return info;
    }
    match std::env::var("REDISCLI_AUTH") {
        Ok(password) if !password.is_empty() => {
            let settings = info.redis_settings().clone().set_password(password);
            info.set_redis_settings(settings)
        }
        _ => info,
    }
}

/// Resolves the connection options into a target: asks the Sentinels for
/// the master's address when `--sentinel` is given.
pub async fn resolve(connection: &Connection) -> Result<Target, Failure> {
    if !connection.cluster.is_empty() {
        if connection.url.is_some() && std::env::var("DLOCK_URL").ok() != connection.url {
            return Err(Failure::usage(
                "--url and --cluster both name servers: give the Cluster's nodes with --cluster only",
            ));
        }
        let seeds = connection
            .cluster
            .iter()
            .map(|url| parse_url(url, "--cluster"))
            .collect::<Result<Vec<_>, _>>()?;
        let shown = connection
            .cluster
            .iter()
            .map(|url| without_password(url))
            .collect::<Vec<_>>()
            .join(",");
        return Ok(Target::Cluster { seeds, shown });
    }
    if !connection.sentinel.is_empty() {
        let Some(master) = &connection.master else {
            return Err(Failure::usage("--sentinel needs --master NAME"));
        };
        return sentinel_master(connection, master).await;
    }
    if connection.master.is_some() {
        return Err(Failure::usage("--master needs --sentinel URL"));
    }
    let url = connection
        .url
        .clone()
        .unwrap_or_else(|| DEFAULT_URL.to_string());
    let info = parse_url(&url, "--url (or DLOCK_URL)")?;
    Ok(Target::Standalone {
        info: Box::new(info),
        shown: without_password(&url),
    })
}

/// Asks each Sentinel in turn for the master's address
/// (`SENTINEL GET-MASTER-ADDR-BY-NAME`), then checks that the server there
/// says it is a master. The lock's connection then goes to that address:
/// after a failover the renewals fail and the lock counts as lost (76),
/// which is what a failover means for a lock anyway.
async fn sentinel_master(connection: &Connection, master: &str) -> Result<Target, Failure> {
    let mut failures = Vec::new();
    for sentinel_url in &connection.sentinel {
        let sentinel = parse_url(sentinel_url, "--sentinel")?;
        let reply: redis::RedisResult<Option<(String, u16)>> = async {
            let client = redis::Client::open(sentinel.clone())?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(master)
                .query_async(&mut conn)
                .await
        }
        .await;
        match reply {
            Ok(Some((host, port))) => {
                // The data node takes the credentials of --url/DLOCK_URL
                // (or REDISCLI_AUTH), the Sentinel's own stay with it.
                let base = match &connection.url {
                    Some(url) => parse_url(url, "--url (or DLOCK_URL)")?,
                    None => with_env_password(
                        DEFAULT_URL
                            .into_connection_info()
                            .map_err(|e| Failure::usage(e.to_string()))?,
                    ),
                };
                let addr = match base.addr() {
                    redis::ConnectionAddr::TcpTls {
                        insecure,
                        tls_params,
                        ..
                    } => redis::ConnectionAddr::TcpTls {
                        host: host.clone(),
                        port,
                        insecure: *insecure,
                        tls_params: tls_params.clone(),
                    },
                    _ => redis::ConnectionAddr::Tcp(host.clone(), port),
                };
                let info = base.set_addr(addr);
                return Ok(Target::Standalone {
                    info: Box::new(info),
                    shown: format!(
                        "{host}:{port} (master '{master}' of {})",
                        without_password(sentinel_url)
                    ),
                });
            }
            Ok(None) => failures.push(format!(
                "{} knows no master named '{master}'",
                without_password(sentinel_url)
            )),
            Err(error) => failures.push(format!("{}: {error}", without_password(sentinel_url))),
        }
    }
    Err(Failure::new(
        code::UNAVAILABLE,
        format!(
            "no Sentinel gave the address of master '{master}' ({}): check --sentinel and --master",
            failures.join("; ")
        ),
    ))
}

/// Connects the dlock client.
pub async fn client(target: &Target) -> Result<dlock_client::Client, Failure> {
    let result = match target {
        Target::Standalone { info, .. } => {
            dlock_client::Client::open_with((**info).clone(), dlock_client::Config::default()).await
        }
        Target::Cluster { seeds, .. } => {
            let mut builder = redis::cluster::ClusterClientBuilder::new(seeds.clone());
            if let Some(first) = seeds.first() {
                if let Some(password) = first.redis_settings().password() {
                    builder = builder.password(password);
                }
                if let Some(user) = first.redis_settings().username() {
                    builder = builder.username(user);
                }
            }
            dlock_client::Client::from_cluster(builder, dlock_client::Config::default()).await
        }
    };
    result.map_err(|error| refused(target, None, &error))
}

/// The failure for an error of the server or the connection: what failed
/// and what to do, with exit code 69.
pub fn refused(target: &Target, key: Option<&str>, error: &dlock_client::Error) -> Failure {
    let server = target.shown();
    let text = error.to_string();
    let code_of = error.code().unwrap_or("");
    let message = if code_of == "ERR" && text.to_ascii_lowercase().contains("unknown command") {
        format!(
            "the server at {server} has no DLOCK commands: load the module (loadmodule .../libdlock.so in redis.conf, or MODULE LOAD .../libdlock.so)"
        )
    } else if code_of == "NOAUTH" || text.contains("NOAUTH") {
        format!(
            "the server at {server} needs a password (NOAUTH): put it in DLOCK_URL (redis://user:password@host:port/) or in REDISCLI_AUTH"
        )
    } else if code_of == "WRONGPASS"
        || text.contains("WRONGPASS")
        || matches!(error, dlock_client::Error::Connection(e) if e.kind() == redis::ErrorKind::AuthenticationFailed)
    {
        format!(
            "the server at {server} refused the user name or password (WRONGPASS): check DLOCK_URL or REDISCLI_AUTH"
        )
    } else if code_of == "NOPERM" || text.contains("NOPERM") {
        format!(
            "the server at {server} does not let this user run that command on {} ({text}): grant it the DLOCK commands and the key (ACL SETUSER <user> +@dlock ~<key pattern>)",
            key.unwrap_or("this key")
        )
    } else if code_of == "WRONGTYPE" {
        format!(
            "{} at {server} holds another type of value ({text}): pick another key",
            key.unwrap_or("the key")
        )
    } else if error.is_connection_error() {
        format!(
            "cannot reach the server at {server} ({text}): check --url, DLOCK_URL or --cluster, and that the server runs"
        )
    } else {
        format!("the server at {server} answered: {text}")
    };
    Failure::new(code::UNAVAILABLE, message)
}

/// The failure for an error of the `redis` crate (inspection commands).
pub fn refused_redis(target: &Target, key: Option<&str>, error: redis::RedisError) -> Failure {
    refused(target, key, &dlock_client::Error::from(error))
}

/// Plain connections to every master (one for a single server), for the
/// read-only inspection commands (`DLOCK.INFO`, `SCAN`, `INFO dlock`).
pub async fn masters(
    target: &Target,
) -> Result<Vec<(String, redis::aio::MultiplexedConnection)>, Failure> {
    let infos: Vec<(String, ConnectionInfo)> = match target {
        Target::Standalone { info, shown } => vec![(shown.clone(), (**info).clone())],
        Target::Cluster { seeds, .. } => cluster_masters(target, seeds).await?,
    };
    let mut conns = Vec::with_capacity(infos.len());
    for (shown, info) in infos {
        let conn = async {
            let client = redis::Client::open(info)?;
            client.get_multiplexed_async_connection().await
        }
        .await
        .map_err(|error| refused_redis(target, None, error))?;
        conns.push((shown, conn));
    }
    Ok(conns)
}

/// The masters of a Cluster, from `CLUSTER NODES` of the first seed that
/// answers.
async fn cluster_masters(
    target: &Target,
    seeds: &[ConnectionInfo],
) -> Result<Vec<(String, ConnectionInfo)>, Failure> {
    let mut last_error = None;
    for seed in seeds {
        let nodes: redis::RedisResult<String> = async {
            let client = redis::Client::open(seed.clone())?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut conn)
                .await
        }
        .await;
        match nodes {
            Ok(nodes) => {
                let mut masters = Vec::new();
                for line in nodes.lines() {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    if fields.len() < 8 || !fields[2].split(',').any(|f| f == "master") {
                        continue;
                    }
                    if fields[2].split(',').any(|f| f == "fail" || f == "noaddr") {
                        continue;
                    }
                    let address = fields[1].split('@').next().unwrap_or("");
                    let Some((host, port)) = address.rsplit_once(':') else {
                        continue;
                    };
                    let Ok(port) = port.parse::<u16>() else {
                        continue;
                    };
                    let addr = match seed.addr() {
                        redis::ConnectionAddr::TcpTls {
                            insecure,
                            tls_params,
                            ..
                        } => redis::ConnectionAddr::TcpTls {
                            host: host.to_string(),
                            port,
                            insecure: *insecure,
                            tls_params: tls_params.clone(),
                        },
                        _ => redis::ConnectionAddr::Tcp(host.to_string(), port),
                    };
                    masters.push((format!("{host}:{port}"), seed.clone().set_addr(addr)));
                }
                masters.sort_by(|a, b| a.0.cmp(&b.0));
                return Ok(masters);
            }
            Err(error) => last_error = Some(error),
        }
    }
    match last_error {
        Some(error) => Err(refused_redis(target, None, error)),
        None => Err(Failure::usage("--cluster needs at least one seed URL")),
    }
}
