//! `/docs` on a box with tokens: the document names the bearer scheme the `/v1/` calls take, so Swagger UI
//! offers its Authorize button (without it every "Try it out" got 401), and the routes that need no token
//! require none in the document either.
use crate::common;

use common::*;
use serde_json::{json, Value};

const SECRET: &str = "docs-secret-0123456";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_offers_the_bearer_token_that_the_v1_calls_take() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = format!("docs:{SECRET}");
    let server = Server::start(dir.path(), &[("VAEBOX_TOKENS", &tokens)]);
    let client = client();
    let (status, doc) = get_json(&client, &server.url("/openapi.json")).await;
    assert_eq!(status, 200, "the document is open: {doc}");
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap_or_else(|| panic!("no securitySchemes: {}", doc["components"]));
    let (name, scheme) = schemes.iter().next().unwrap();
    assert_eq!(schemes.len(), 1, "{schemes:?}");
    assert_eq!((scheme["type"].as_str(), scheme["scheme"].as_str()), (Some("http"), Some("bearer")), "{scheme}");

    // What the document requires is what the box does: each `/v1/` operation names the scheme, answers 401
    // without the token and not with it; every other one names none and answers without a token.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let security = &operation["security"];
            if path.starts_with("/v1/") {
                assert_eq!(security, &json!([{ name.as_str(): [] }]), "{method} {path}");
            } else {
                assert!(security.is_null(), "{method} {path}: {security}");
            }
            if method != "get" || path.contains('{') {
                continue;
            }
            let without = client.get(server.url(path)).send().await.unwrap().status().as_u16();
            let with = client.get(server.url(path)).bearer_auth(SECRET).send().await.unwrap().status().as_u16();
            if path.starts_with("/v1/") {
                assert_eq!((without, with), (401, 200), "GET {path}");
            } else {
                assert_eq!((without, with), (200, 200), "GET {path}");
            }
        }
    }
    assert!(doc.pointer("/paths/~1v1~1jobs/post/security").is_some_and(Value::is_array));

    // Swagger UI, rendered off the network, shows its Authorize button for the scheme.
    let url = server.url("/docs");
    let profile = dir.path().join("chromium-profile");
    let dom = tokio::task::spawn_blocking(move || rendered_dom(&url, &profile)).await.unwrap();
    assert!(dom.contains("Create a job from an upload"), "the page did not render:\n{dom}");
    assert!(dom.contains("btn authorize"), "no Authorize button:\n{dom}");
}
