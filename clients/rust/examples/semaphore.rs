//! A semaphore: at most 3 of 10 tasks work at once; each permit has its own
//! lease. `cargo run -p dlock-client --example semaphore` against `make run`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[tokio::main]
async fn main() -> dlock_client::Result<()> {
    let url = std::env::var("DLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let dlock = dlock_client::Client::open(url.as_str()).await?;
    let working = Arc::new(AtomicUsize::new(0));

    let mut tasks = Vec::new();
    for worker in 0..10 {
        let (dlock, working) = (dlock.clone(), working.clone());
        tasks.push(tokio::spawn(async move {
            let permit = dlock
                .semaphore("example:api", 3)
                .wait(Duration::from_secs(30))
                .acquire()
                .await?;
            let now = working.fetch_add(1, Ordering::SeqCst) + 1;
            println!("worker {worker} in ({now} working)");
            tokio::time::sleep(Duration::from_millis(300)).await;
            working.fetch_sub(1, Ordering::SeqCst);
            permit.release().await
        }));
    }
    for task in tasks {
        task.await.expect("a worker task")?;
    }
    Ok(())
}
