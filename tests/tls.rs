//! gRPC over TLS and mutual TLS with certificates made at test time, and the limits against
//! abuse: an oversized or malformed request gets an error and the server stays healthy.

mod common;

use common::tls::{CertFiles, TestCa};
use common::{ServerBuilder, TestServer};
use snowmint::proto::id_service_client::IdServiceClient;
use snowmint::proto::{BatchIdsRequest, BatchIdsResponse, DecodeRequest, DecodeResponse, NextIdRequest};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A server over TLS with a certificate from a new CA in its dir (with mutual TLS, asking
/// clients for one from it too), and the CA.
async fn tls_server(mutual: bool) -> (TestServer, TestCa) {
    let builder = ServerBuilder::new();
    let ca = TestCa::new(builder.dir(), "ca");
    let server = builder.tls(&ca.issue("snowmint-server"), mutual.then_some(ca.ca.as_path())).start().await;
    (server, ca)
}

async fn tls_channel(
    server: &TestServer,
    ca: &TestCa,
    identity: Option<&CertFiles>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(&ca.ca).unwrap()))
        .domain_name("localhost");
    if let Some(files) = identity {
        tls = tls.identity(Identity::from_pem(std::fs::read(&files.cert).unwrap(), std::fs::read(&files.key).unwrap()));
    }
    Endpoint::from_shared(format!("https://{}", server.grpc))
        .unwrap()
        .timeout(common::CALL_LIMIT)
        .connect_timeout(common::CALL_LIMIT)
        .tls_config(tls)?
        .connect()
        .await
}

#[tokio::test]
async fn tls_call_works_and_plain_text_is_refused() {
    let (server, ca) = tls_server(false).await;
    let mut client = IdServiceClient::new(tls_channel(&server, &ca, None).await.unwrap());
    let ids = client.batch_ids(BatchIdsRequest { count: 10, ..Default::default() }).await.unwrap().into_inner().ids;
    assert_eq!(ids.len(), 10);

    // A plain-text client gets no IDs from a TLS server.
    let plain = Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .timeout(common::CALL_LIMIT)
        .connect_timeout(common::CALL_LIMIT)
        .connect()
        .await;
    if let Ok(channel) = plain {
        let status = IdServiceClient::new(channel).next_id(NextIdRequest::default()).await.unwrap_err();
        assert_ne!(status.code(), tonic::Code::Ok);
    }
    server.stop().await;
}

#[tokio::test]
async fn mutual_tls_needs_a_client_certificate_from_the_ca() {
    let (server, ca) = tls_server(true).await;
    let client_cert = ca.issue("client");
    let mut client = IdServiceClient::new(tls_channel(&server, &ca, Some(&client_cert)).await.unwrap());
    client.next_id(NextIdRequest::default()).await.unwrap();

    // Without a certificate: refused.
    let refused = match tls_channel(&server, &ca, None).await {
        Err(_) => true,
        Ok(channel) => IdServiceClient::new(channel).next_id(NextIdRequest::default()).await.is_err(),
    };
    assert!(refused, "a client without a certificate got an ID");

    // With a certificate from another CA: refused.
    let other = TestCa::new(server.dir(), "other-ca");
    let stranger = other.issue("stranger");
    let refused = match tls_channel(&server, &ca, Some(&stranger)).await {
        Err(_) => true,
        Ok(channel) => IdServiceClient::new(channel).next_id(NextIdRequest::default()).await.is_err(),
    };
    assert!(refused, "a client with a certificate from another CA got an ID");
    assert_eq!(server.metric(r#"snowmint_requests_total{code="OK",method="NextId",protocol="grpc"}"#).await, 1.0);
    server.stop().await;
}

#[tokio::test]
async fn oversized_and_malformed_requests_get_errors_and_the_server_stays_healthy() {
    let server = ServerBuilder::new().start().await;
    let mut client = server.client().await;

    // Far above the 16 KiB request limit.
    let huge = "x".repeat(1 << 20);
    let status = client.decode(DecodeRequest { id: 1, layout: huge, ..Default::default() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");

    // Bytes that are not the message the method takes: field 1 arrives length-delimited
    // where Decode expects a fixed64.
    let channel = common::channel(server.grpc).await;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<BatchIdsResponse, DecodeResponse>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/snowmint.v1.IdService/Decode");
    let status = grpc
        .unary(tonic::Request::new(BatchIdsResponse { ids: vec![1, 2, 3], ..Default::default() }), path, codec)
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert!(status.message().contains("decode"), "{status:?}");

    // Still healthy and minting.
    client.next_id(NextIdRequest::default()).await.unwrap();
    assert_eq!(server.admin_get("/readyz").await.0, 200);
    server.stop().await;
}
