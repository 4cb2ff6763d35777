//! A read-write lock: readers share, a writer waits for them and readers
//! arriving after it wait behind it. `cargo run -p dlock-client --example read_write`
//! against `make run`.

use std::time::Duration;

#[tokio::main]
async fn main() -> dlock_client::Result<()> {
    let url = std::env::var("DLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let dlock = dlock_client::Client::open(url.as_str()).await?;

    let reader_1 = dlock.read_lock("example:catalog").acquire().await?;
    let reader_2 = dlock.read_lock("example:catalog").acquire().await?;
    println!(
        "two readers at once, tokens {} and {}",
        reader_1.token(),
        reader_2.token()
    );

    let writer = tokio::spawn({
        let dlock = dlock.clone();
        async move {
            let writer = dlock
                .write_lock("example:catalog")
                .wait(Duration::from_secs(10))
                .acquire()
                .await?;
            println!("writer in, token {}", writer.token());
            writer.release().await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!("readers leave");
    reader_1.release().await?;
    reader_2.release().await?;
    writer.await.expect("the writer task")?;
    Ok(())
}
