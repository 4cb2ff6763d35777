//! A count-down latch: a coordinator waits until three workers are done.
//! `cargo run -p dlock-client --example latch` against `make run` (needs a
//! server with DLOCK.LATCH).

use std::time::Duration;

#[tokio::main]
async fn main() -> dlock_client::Result<()> {
    let url = std::env::var("DLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let dlock = dlock_client::Client::open(url.as_str()).await?;
    let latch = dlock.latch("example:batch");
    latch.create(3, Duration::from_secs(60)).await?;

    let mut workers = Vec::new();
    for worker in 0..3u64 {
        let latch = latch.clone();
        workers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200 * (worker + 1))).await;
            match latch.count_down(1).await {
                Ok(left) => println!("worker {worker} done, {left} left"),
                Err(error) => println!("worker {worker}: {error}"),
            }
        }));
    }
    let outcome = latch.wait(Duration::from_secs(10)).await?;
    println!("coordinator: {outcome:?}");
    for worker in workers {
        let _ = worker.await;
    }
    Ok(())
}
