//! Mints IDs from the snowmint servers in $SNOWMINT_ENDPOINTS (comma-separated URLs).

use std::time::Duration;

use snowmint_client::{BufferConfig, Client, ClientError};

#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let endpoints = std::env::var("SNOWMINT_ENDPOINTS").unwrap_or_else(|_| "http://127.0.0.1:50051".into());
    mint(&endpoints).await
}

pub async fn mint(endpoints: &str) -> Result<(), ClientError> {
    let client = Client::builder(endpoints.split(','))
        .timeout(Duration::from_millis(500)) // per attempt on a server; 1 s by default
        .buffer(BufferConfig::default()) // optional: prefetch IDs in the background
        .connect()?;
    // ClientError::is_retriable(): every server refused or failed; try again later.
    let id = client.next_id().await?; // unique across every server
    let ids = client.batch_within(3, Duration::from_secs(2)).await?; // strictly increasing, from one server
    println!("id {id}; batch {ids:?}");
    // In JSON an ID is a string: JavaScript's numbers lose precision past 2^53.
    println!("{{\"id\":\"{id}\"}}");
    client.close();
    Ok(())
}
