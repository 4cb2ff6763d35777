//! A small network made of Linux network namespaces, for the partition suite.
//!
//! Every host (server, Sentinel, group of clients) is a namespace with one
//! veth link to a switch namespace. The switch holds two bridges: `br0`,
//! where every link normally sits, and `br1`, the far side of a partition.
//! Cutting the network moves some links to `br1` (frames between the two
//! bridges are silently lost, like a failed switch or a cut cable: nobody
//! gets an error, only timeouts); healing moves them back. A link can also
//! be slowed with `tc` (a token-bucket filter on its egress towards the host,
//! which queues everything the host receives: a lagging replica).
//!
//! Nothing is created in the machine's own namespace. Everything (processes,
//! namespaces, links, bridges) is removed when the `Net` and the `NetProcess`es
//! are dropped, also when a test panics; namespaces left behind by a test
//! process that was killed are removed by the next run.
//!
//! Requires root and a kernel with network namespaces, veth and bridges:
//! `Net::unavailable()` says why not.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Prefix of every namespace this suite creates (followed by the test
/// process id, so that runs in parallel never touch each other's).
const PREFIX: &str = "dlockpt";

static NEXT_NET: AtomicUsize = AtomicUsize::new(0);

extern "C" {
    fn setns(fd: i32, nstype: i32) -> i32;
}

const CLONE_NEWNET: i32 = 0x4000_0000;

/// Runs `ip` with `args`; Err with its output if it fails.
pub fn ip(args: &[&str]) -> Result<(), String> {
    run_tool("ip", args)
}

fn run_tool(tool: &str, args: &[&str]) -> Result<(), String> {
    match Command::new(tool).args(args).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "`{tool} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(error) => Err(format!("cannot run `{tool}`: {error}")),
    }
}

fn must(result: Result<(), String>) {
    if let Err(error) = result {
        panic!("{error}");
    }
}

/// Moves the calling thread into namespace `ns` (for good: call it on a
/// thread of its own). Sockets it opens afterwards live in that namespace,
/// whichever thread later uses them.
pub fn enter(ns: &str) {
    let path = format!("/var/run/netns/{ns}");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    use std::os::fd::AsRawFd;
    // SAFETY: setns(2) on a valid namespace file descriptor, for this thread only.
    let rc = unsafe { setns(file.as_raw_fd(), CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns({ns}): {}", std::io::Error::last_os_error());
}

/// Runs `f` on a thread inside namespace `ns` and returns its result.
pub fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns);
        f()
    })
    .join()
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// A host: a namespace with one address on the network.
#[derive(Clone, Debug)]
pub struct Host {
    pub name: String,
    pub ns: String,
    pub ip: String,
    /// Its link's name in the switch namespace.
    port: String,
}

/// A second, private link between two hosts (its own bridge and subnet):
/// traffic between their `a_ip` and `b_ip` takes it, and only that.
#[derive(Clone, Debug)]
pub struct SideLink {
    pub a_ip: String,
    pub b_ip: String,
    /// The device of the link inside both hosts.
    pub device: String,
    /// The link of `b` in the switch namespace (to slow down what b receives).
    pub b_port: String,
}

/// The network: a switch namespace and the hosts linked to it.
pub struct Net {
    switch: String,
    hosts: Vec<Host>,
    subnet: String,
    side_links: usize,
}

impl Net {
    /// Why this machine cannot run the suite, or None if it can (probed
    /// once per process).
    pub fn unavailable() -> Option<String> {
        static PROBED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        PROBED.get_or_init(Net::probe).clone()
    }

    fn probe() -> Option<String> {
        let probe = format!("{PREFIX}{}-probe", std::process::id());
        let _ = ip(&["netns", "del", &probe]);
        let outcome = (|| {
            ip(&["netns", "add", &probe])?;
            ip(&["-n", &probe, "link", "add", "br0", "type", "bridge"])?;
            ip(&[
                "-n", &probe, "link", "add", "a0", "type", "veth", "peer", "name", "b0",
            ])?;
            ip(&["-n", &probe, "link", "set", "a0", "master", "br0"])?;
            run_tool(
                "tc",
                &[
                    "-n", &probe, "qdisc", "add", "dev", "a0", "root", "tbf", "rate", "1mbit",
                    "burst", "16kb", "latency", "100ms",
                ],
            )?;
            Ok::<(), String>(())
        })();
        let _ = ip(&["netns", "del", &probe]);
        outcome.err()
    }

    /// A new network with its switch; removes what dead runs left behind.
    pub fn new() -> Net {
        remove_leftovers();
        let n = NEXT_NET.fetch_add(1, Ordering::Relaxed);
        let switch = format!("{PREFIX}{}-{n}-sw", std::process::id());
        let net = Net {
            switch: switch.clone(),
            hosts: Vec::new(),
            // 10.<200+n>.<pid>: distinct per network of this process.
            subnet: format!("10.{}.{}", 200 + n % 50, std::process::id() % 250),
            side_links: 0,
        };
        must(ip(&["netns", "add", &switch]));
        for bridge in ["br0", "br1"] {
            must(ip(&[
                "-n", &switch, "link", "add", bridge, "type", "bridge",
            ]));
            must(ip(&["-n", &switch, "link", "set", bridge, "up"]));
        }
        net
    }

    /// A new host linked to `br0`.
    pub fn add_host(&mut self, name: &str) -> Host {
        let index = self.hosts.len() + 1;
        let ns = self.switch.replace("-sw", &format!("-{name}"));
        let port = format!("p{index}");
        let host = Host {
            name: name.to_string(),
            ns: ns.clone(),
            ip: format!("{}.{}", self.subnet, index + 1),
            port: port.clone(),
        };
        must(ip(&["netns", "add", &ns]));
        self.hosts.push(host.clone());
        must(ip(&[
            "-n",
            &self.switch,
            "link",
            "add",
            &port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &ns,
        ]));
        must(ip(&[
            "-n",
            &self.switch,
            "link",
            "set",
            &port,
            "master",
            "br0",
        ]));
        must(ip(&["-n", &self.switch, "link", "set", &port, "up"]));
        must(ip(&["-n", &ns, "link", "set", "lo", "up"]));
        must(ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{}/24", host.ip),
            "dev",
            "eth0",
        ]));
        must(ip(&["-n", &ns, "link", "set", "eth0", "up"]));
        host
    }

    /// A private link between `a` and `b` on a bridge of its own (`eth1`
    /// in each, addresses in a subnet of their own).
    pub fn add_side_link(&mut self, a: &Host, b: &Host) -> SideLink {
        self.side_links += 1;
        let n = self.side_links;
        let bridge = format!("bs{n}");
        must(ip(&[
            "-n",
            &self.switch,
            "link",
            "add",
            &bridge,
            "type",
            "bridge",
        ]));
        must(ip(&["-n", &self.switch, "link", "set", &bridge, "up"]));
        // Namespaces keep every net apart: only the hosts' own subnets
        // must differ.
        let subnet = format!("172.{}.0", 15 + n);
        let mut ips = Vec::new();
        for (index, host) in [a, b].iter().enumerate() {
            let port = format!("s{n}{}", index + 1);
            let device = format!("eth{n}");
            let address = format!("{subnet}.{}", index + 1);
            must(ip(&[
                "-n",
                &self.switch,
                "link",
                "add",
                &port,
                "type",
                "veth",
                "peer",
                "name",
                &device,
                "netns",
                &host.ns,
            ]));
            must(ip(&[
                "-n",
                &self.switch,
                "link",
                "set",
                &port,
                "master",
                &bridge,
            ]));
            must(ip(&["-n", &self.switch, "link", "set", &port, "up"]));
            must(ip(&[
                "-n",
                &host.ns,
                "addr",
                "add",
                &format!("{address}/24"),
                "dev",
                &device,
            ]));
            must(ip(&["-n", &host.ns, "link", "set", &device, "up"]));
            ips.push((address, port));
        }
        SideLink {
            device: format!("eth{n}"),
            a_ip: ips[0].0.clone(),
            b_ip: ips[1].0.clone(),
            b_port: ips[1].1.clone(),
        }
    }

    /// Makes `host` reach address `to` (of the link's other end) through
    /// `link` rather than the bridge: a host route.
    pub fn route_through(&self, host: &Host, to: &str, link: &SideLink) {
        must(ip(&[
            "-n",
            &host.ns,
            "route",
            "add",
            &format!("{to}/32"),
            "dev",
            &link.device,
        ]));
    }

    /// Cuts `side` off from every other host: their links move to the
    /// other bridge. Hosts on the same side still reach each other.
    pub fn partition(&self, side: &[&Host]) {
        for host in side {
            must(ip(&[
                "-n",
                &self.switch,
                "link",
                "set",
                &host.port,
                "master",
                "br1",
            ]));
        }
    }

    /// Puts every link back on the same bridge.
    pub fn heal(&self) {
        for host in &self.hosts {
            must(ip(&[
                "-n",
                &self.switch,
                "link",
                "set",
                &host.port,
                "master",
                "br0",
            ]));
        }
    }

    /// Slows everything that reaches a host through the link `port` (a
    /// switch-side link name, [`SideLink::b_port`]) to `rate` (tc syntax, e.g.
    /// `64kbit`), queueing up to `latency` (e.g. `1500ms`) before dropping:
    /// a replica whose replication stream falls further and further behind.
    pub fn slow_down(&self, port: &str, rate: &str, latency: &str) {
        must(run_tool(
            "tc",
            &[
                "-n",
                &self.switch,
                "qdisc",
                "replace",
                "dev",
                port,
                "root",
                "tbf",
                "rate",
                rate,
                "burst",
                "4kb",
                "latency",
                latency,
            ],
        ));
    }

    /// Removes the slowdown of the link `port` (what was queued is lost).
    pub fn restore(&self, port: &str) {
        let _ = run_tool(
            "tc",
            &["-n", &self.switch, "qdisc", "del", "dev", port, "root"],
        );
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Processes were stopped by their own guards (declared after the
        // Net, so dropped first); deleting a namespace removes its links.
        for host in &self.hosts {
            let _ = ip(&["netns", "del", &host.ns]);
        }
        let _ = ip(&["netns", "del", &self.switch]);
    }
}

/// Deletes the namespaces of test processes that no longer run.
fn remove_leftovers() {
    let Ok(entries) = std::fs::read_dir("/var/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if pid.is_empty() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = ip(&["netns", "del", &name]);
    }
}

/// A process running inside a host's namespace, killed (SIGKILL) on drop.
pub struct NetProcess {
    child: Option<Child>,
    program: String,
    args: Vec<String>,
    pub ns: String,
    pub dir: PathBuf,
    pub log: PathBuf,
}

impl NetProcess {
    /// Starts `program args` in `host`'s namespace; `dir` is its directory
    /// and `log` the file it logs to (for error messages).
    pub fn start(host: &Host, program: &str, args: &[String], dir: &Path, log: &str) -> NetProcess {
        let mut process = NetProcess {
            child: None,
            program: program.to_string(),
            args: args.to_vec(),
            ns: host.ns.clone(),
            dir: dir.to_path_buf(),
            log: dir.join(log),
        };
        process.spawn();
        process
    }

    fn spawn(&mut self) {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, &self.program])
            .args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn a process in a namespace");
        self.child = Some(child);
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again with the same arguments.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// The tail of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for NetProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `condition` every 50 ms until it holds or `patience` runs out.
pub fn poll(patience: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + patience;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
