//! An exclusive lock with a fencing token, a watchdog-renewed lease and the
//! lost-lock signal. Run `make run` in one terminal, then
//! `cargo run -p dlock-client --example lock` (DLOCK_URL overrides the
//! server, default redis://127.0.0.1:6379/).

use std::time::Duration;

#[tokio::main]
async fn main() -> dlock_client::Result<()> {
    let url = std::env::var("DLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let dlock = dlock_client::Client::open(url.as_str()).await?;

    let guard = dlock
        .lock("example:orders:42")
        .lease(Duration::from_secs(2)) // renewed every 2/3 s while held
        .wait(Duration::from_secs(10))
        .acquire()
        .await?;
    println!(
        "holding example:orders:42 with fencing token {}",
        guard.token()
    );

    // Work for longer than the lease: the watchdog keeps the lock held.
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(5)) => println!("work done, lock still held: {}", guard.is_held()),
        _ = guard.lost() => println!("lock lost: stopping the work"),
    }

    // A second request by another owner is refused while we hold it.
    match dlock.lock("example:orders:42").acquire().await {
        Err(dlock_client::Error::Busy) => println!("a second owner is refused: Busy"),
        other => println!("unexpected: {other:?}"),
    }
    guard.release().await?;
    println!("released");
    Ok(())
}
