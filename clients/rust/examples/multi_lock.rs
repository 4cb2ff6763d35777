//! Two accounts locked in one atomic step (DLOCK.MACQUIRE): all keys or
//! none, so transfers in opposite directions never deadlock.
//! `cargo run -p dlock-client --example multi_lock` against `make run`
//! (needs a server with DLOCK.MACQUIRE).

use std::time::Duration;

#[tokio::main]
async fn main() -> dlock_client::Result<()> {
    let url = std::env::var("DLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let dlock = dlock_client::Client::open(url.as_str()).await?;

    let transfers = [("1", "2"), ("2", "1"), ("1", "2"), ("2", "1")].map(|(from, to)| {
        let dlock = dlock.clone();
        tokio::spawn(async move {
            let guard = dlock
                .multi_lock([
                    format!("example:{{bank}}:account:{from}"),
                    format!("example:{{bank}}:account:{to}"),
                ])
                .wait(Duration::from_secs(10))
                .acquire()
                .await?;
            for (key, token) in guard.tokens() {
                println!(
                    "{from} -> {to}: {} token {token}",
                    String::from_utf8_lossy(key)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            guard.release().await
        })
    });
    for transfer in transfers {
        transfer.await.expect("a transfer task")?;
    }
    Ok(())
}
