//! Leader election: three candidates campaign for `example:leader`; one
//! leads for a while and resigns, the next in line takes over, and an
//! observer prints each change as the server makes it (`DLOCK.WATCH`).
//! `cargo run -p dlock-client --example election` against `make run`.

use std::time::Duration;

#[tokio::main]
async fn main() -> dlock_client::Result<()> {
    let url = std::env::var("DLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let dlock = dlock_client::Client::open(url.as_str()).await?;
    let election = dlock
        .election("example:leader")
        .lease(Duration::from_secs(5));

    // A follower: who leads now, then every change, never a stale one.
    let mut observer = election.observe();
    let watcher = tokio::spawn(async move {
        let mut seen_a_leader = false;
        loop {
            match observer.next().await {
                Ok(Some(leader)) => {
                    seen_a_leader = true;
                    println!(
                        "observer: {} leads (term {})",
                        leader.value_str(),
                        leader.term
                    );
                }
                Ok(None) if seen_a_leader => {
                    println!("observer: nobody leads any more");
                    return;
                }
                Ok(None) => println!("observer: nobody leads"),
                Err(error) => println!("observer: {error}"),
            }
        }
    });

    let mut candidates = Vec::new();
    for node in ["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"] {
        let election = election.clone();
        candidates.push(tokio::spawn(async move {
            let leadership = election.campaign(node).await?;
            println!("{node}: leading in term {}", leadership.term());
            // Lead while the guard holds: pass the term to what you write,
            // and stop at once if the leadership is lost.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(300)) => {}
                _ = leadership.lost() => {
                    println!("{node}: lost the leadership, stopping");
                    return Ok(());
                }
            }
            println!("{node}: resigning");
            leadership.resign().await
        }));
    }
    for candidate in candidates {
        candidate.await.expect("a candidate task")?;
    }
    // The observer stops after the last resignation; dropping it (here, at
    // the runtime's end) would also end its wait on the server.
    let _ = tokio::time::timeout(Duration::from_secs(2), watcher).await;
    Ok(())
}
