//! The `rust` blocks of clients/rust/README.md and of the Rust section of
//! docs/clients.md, compiled into this suite by build.rs and run against a
//! server (as tests/docs.rs runs the server's documented sessions). A block
//! that no longer compiles fails the build of this suite; one that fails
//! fails it at run time.
//!
//! The stubs below are the helpers the blocks call but do not define; each
//! checks what it is given (a fence or a term is positive). The latch
//! block waits for the other workers: a thread plays them, counting the
//! latch down once the block waits on it.

use crate::common;

use std::sync::OnceLock;
use std::time::Duration;

use common::Server;

static URL: OnceLock<String> = OnceLock::new();

/// The address the blocks connect to: the test server's.
pub fn snippet_url() -> String {
    URL.get().expect("the test sets the server's URL").clone()
}

include!(concat!(env!("OUT_DIR"), "/snippets.rs"));

pub async fn pay_order(order: u32, token: u64) {
    assert!(order > 0 && token > 0, "order {order}, token {token}");
}
pub async fn work() {}
pub async fn write_order(order: u32, token: u64) {
    assert!(order > 0 && token > 0, "order {order}, token {token}");
}
pub async fn read_catalog() -> Vec<u8> {
    b"catalog".to_vec()
}
pub async fn write_catalog(catalog: Vec<u8>, token: u64) {
    assert!(!catalog.is_empty() && token > 0);
}
pub async fn call_payment_api() {}
pub async fn run_batch(token: u64) {
    assert!(token > 0);
}
pub async fn serve_as_leader(term: u64) {
    assert!(term > 0);
}
pub fn route_to(value: &[u8]) {
    assert!(!value.is_empty());
}
pub fn shutting_down() -> bool {
    true
}

const _: () = assert!(README_BLOCKS > 0, "README.md has no rust block");
const _: () = assert!(DOCS_BLOCKS > 0, "docs/clients.md#rust has no rust block");

#[test]
fn documented_rust_blocks_compile_and_run() {
    let server = Server::start();
    URL.set(format!("redis://127.0.0.1:{}/", server.port))
        .expect("one test sets the URL");

    // Whole programs (#[tokio::main]: each makes its own runtime).
    for (name, main) in readme_programs().into_iter().chain(docs_programs()) {
        main().unwrap_or_else(|err| panic!("{name}: {err}"));
    }

    // The other workers of the latch block: once it waits, they count down.
    let port = server.port;
    let workers = std::thread::spawn(move || {
        let mut conn = common::connect_port(port, Duration::from_secs(30));
        common::wait_until("the latch block to wait", || {
            common::info(&mut conn, "batch:7")
                .and_then(|fields| fields.into_iter().find(|(name, _)| name == "waiting"))
                .is_some_and(|(_, value)| value == redis::Value::Int(1))
        });
        for _ in 0..2 {
            common::cmd(&mut conn, &["DLOCK.COUNTDOWN", "batch:7"]).expect("count down");
        }
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(60), async {
                readme_fragments().await?;
                docs_fragments().await
            })
            .await
            .expect("the documented fragments did not finish within 60 s")
        })
        .unwrap_or_else(|err| panic!("docs/clients.md#rust: {err}"));
    workers.join().expect("the latch's other workers");
}
