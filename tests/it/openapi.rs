//! /openapi.json and /docs from the real server: the document lists every route the router serves (no
//! more), what the server answers has the shape the document gives it, and the reference page renders the
//! document without the network.
use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use serde_json::{json, Value};

/// The routes of `api::router` (src/api/mod.rs), by hand: a route added there without a `#[utoipa::path]`
/// in `api::openapi::ApiDoc` fails here once it is added to this list too. `/docs` is swagger_ui_dist's
/// page (its script and style below it are not API).
const ROUTES: &[(&str, &[&str])] = &[
    ("/", &["get"]),
    ("/js/{name}", &["get"]),
    ("/static/style.css", &["get"]),
    ("/healthz", &["get"]),
    ("/metrics", &["get"]),
    ("/openapi.json", &["get"]),
    ("/docs", &["get"]),
    ("/v1/models", &["get"]),
    ("/v1/presets", &["get"]),
    ("/v1/jobs", &["get", "post"]),
    ("/v1/jobs/{id}", &["delete", "get"]),
    ("/v1/decode", &["post"]),
    ("/v1/encode", &["post"]),
    ("/v1/jobs/{id}/events", &["get"]),
    ("/v1/jobs/{id}/result", &["get"]),
    ("/v1/jobs/{id}/thumbnail", &["get"]),
    ("/v1/jobs/{id}/preview", &["get"]),
    ("/v1/jobs/{id}/cancel", &["post"]),
    ("/v1/jobs/{id}/pause", &["post"]),
    ("/v1/jobs/{id}/resume", &["post"]),
    ("/v1/jobs/{id}/whole", &["post"]),
    ("/v1/estimate", &["post"]),
];

fn schema<'a>(doc: &'a Value, name: &str) -> &'a Value {
    let schema = &doc["components"]["schemas"][name];
    assert!(schema.is_object(), "no {name} schema");
    schema
}

/// Keys of `value` the schema does not describe, and required keys it lacks.
fn off_schema(doc: &Value, name: &str, value: &Value) -> Vec<String> {
    let schema = schema(doc, name);
    let described = schema["properties"].as_object().unwrap();
    let given = value.as_object().unwrap_or_else(|| panic!("{name}: {value}"));
    let mut off: Vec<String> = given.keys().filter(|k| !described.contains_key(*k)).map(|k| format!("{name}.{k} undescribed")).collect();
    for required in schema["required"].as_array().into_iter().flatten() {
        if !given.contains_key(required.as_str().unwrap()) {
            off.push(format!("{name}.{required} missing"));
        }
    }
    off
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_lists_every_route_and_docs_renders_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();

    let response = client.get(server.url("/openapi.json")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let doc: Value = serde_json::from_str(&response.text().await.unwrap()).expect("the document parses");
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["title"], "vaebox");

    let documented: BTreeMap<String, BTreeSet<String>> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(path, item)| (path.clone(), item.as_object().unwrap().keys().filter(|k| *k != "parameters").cloned().collect()))
        .collect();
    let served: BTreeMap<String, BTreeSet<String>> =
        ROUTES.iter().map(|(path, methods)| (path.to_string(), methods.iter().map(|m| m.to_string()).collect())).collect();
    assert_eq!(documented, served);

    // `scale` lists every value some op takes (restore 1 to 4), not only the upscalers' 2 and 4.
    let scale = doc["paths"]["/v1/jobs"]["post"]["parameters"].as_array().unwrap().iter().find(|p| p["name"] == "scale").expect("scale");
    assert_eq!(scale["schema"]["enum"], serde_json::json!([1, 2, 3, 4]), "{scale}");

    // Each GET that takes no input answers 200 with a content type the document gives its 200.
    for (path, _) in ROUTES.iter().filter(|(path, methods)| methods.contains(&"get") && !path.contains('{')) {
        let response = client.get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let served_type = response.headers()["content-type"].to_str().unwrap().to_string();
        let content = doc["paths"][*path]["get"]["responses"]["200"]["content"].as_object().unwrap_or_else(|| panic!("{path}"));
        assert!(content.keys().any(|t| served_type.starts_with(t.as_str())), "{path} serves {served_type}, documented {content:?}");
    }

    // The JSON the box answers has the documented shape.
    let (_, health) = get_json(&client, &server.url("/healthz")).await;
    assert_eq!(off_schema(&doc, "Health", &health), Vec::<String>::new());
    let (_, models) = get_json(&client, &server.url("/v1/models")).await;
    assert_eq!(off_schema(&doc, "ModelList", &models), Vec::<String>::new());
    for model in models["models"].as_array().unwrap() {
        assert_eq!(off_schema(&doc, "ModelInfo", model), Vec::<String>::new());
        let ops = &schema(&doc, "Op")["enum"];
        assert!(model["ops"].as_array().unwrap().iter().all(|op| ops.as_array().unwrap().contains(op)), "{model}");
    }
    let (_, jobs) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(off_schema(&doc, "JobList", &jobs), Vec::<String>::new());
    let (status, refusal) = get_json(&client, &server.url("/v1/jobs?colour=red")).await;
    assert_eq!(status, 400);
    assert_eq!(off_schema(&doc, "Error", &refusal), Vec::<String>::new());
    let codes = &schema(&doc, "Error")["properties"]["error"]["properties"]["code"]["enum"];
    assert!(codes.as_array().unwrap().contains(&refusal["error"]["code"]), "{refusal}");

    // /docs: an HTML page that loads this document, with its script and style from this server.
    let page = client.get(server.url("/docs")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert!(html.contains("'/openapi.json'"), "{html}");
    for asset in ["/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css"] {
        assert!(html.contains(&format!("\"{asset}\"")), "{html}");
        let response = client.get(server.url(asset)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{asset}");
        assert!(response.bytes().await.unwrap().len() > 100_000, "{asset}");
    }
    // Rendered by a real browser kept off the network: the operations' summaries come from the document.
    let url = server.url("/docs");
    let profile = dir.path().join("chromium-profile");
    let dom = tokio::task::spawn_blocking(move || rendered_dom(&url, &profile)).await.unwrap();
    for summary in ["Create a job from an upload", "Decode a latent tensor synchronously", "The API reference page"] {
        assert!(dom.contains(summary), "`{summary}` not rendered:\n{dom}");
    }
}
#[test]
fn the_conformance_check_catches_a_wrong_answer() {
    // A job whose status is not one of the documented values, and an error without its code.
    let job = json!({ "id": "not-a-job", "status": "exploded" });
    let caught = std::panic::catch_unwind(|| conformance::check("GET", "http://127.0.0.1:1/v1/jobs/5c0c0c0c-0000-4000-8000-000000000000", 200, &job));
    assert!(caught.is_err());
    let caught = std::panic::catch_unwind(|| conformance::check("POST", "http://127.0.0.1:1/v1/jobs", 400, &json!({ "error": { "message": "x" } })));
    assert!(caught.is_err());
    let caught = std::panic::catch_unwind(|| conformance::check("GET", "http://127.0.0.1:1/v1/models", 200, &json!({ "models": "none" })));
    assert!(caught.is_err());
    // An unknown path's 404 is held to the error schema.
    conformance::check("GET", "http://127.0.0.1:1/v2/nothing", 404, &json!({ "error": { "code": "not-found", "message": "no route" } }));
}

/// The README's error table names every code the box answers with (`invalid-tile` was once missing).
#[test]
fn the_readme_lists_every_error_code() {
    let readme = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let missing: Vec<&str> = vaebox::error_codes::ALL.iter().copied().filter(|code| !readme.contains(&format!("\n| `{code}` |"))).collect();
    assert!(missing.is_empty(), "README's error table misses {missing:?}");
}

/// Each job parameter's description in the document names the ops that take it, as the table the API and
/// `vaebox run` refuse by says (the document once offered `scale` as {2, 4} while restore took 1-4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_job_parameter_names_the_ops_that_take_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let (status, document) = get_json(&client(), &server.url("/openapi.json")).await;
    assert_eq!(status, 200);
    let parameters = document["paths"]["/v1/jobs"]["post"]["parameters"].as_array().expect("POST /v1/jobs has parameters");
    for parameter in vaebox::queue::PARAMETERS.iter().filter(|p| !p.takes_every_op()) {
        let described = parameters.iter().find(|p| p["name"] == parameter.name).unwrap_or_else(|| panic!("{} is not in the document", parameter.name));
        let ops: Vec<&str> = parameter.ops().map(|op| op.as_str()).collect();
        let description = described["description"].as_str().unwrap_or("");
        assert!(description.starts_with(&format!("Ops: {}. ", ops.join(", "))), "{}: {description}", parameter.name);
        assert_eq!(described["x-vaebox-ops"], json!(ops), "{}", parameter.name);
    }
    // The parameters every op takes say so too (generated clients read `x-vaebox-ops`, not the prose).
    let every_op: Vec<&str> = vaebox::models::Op::ALL.into_iter().map(vaebox::models::Op::as_str).collect();
    for name in ["op", "model", "preset", "priority", "dtype"] {
        let described = parameters.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("{name} is not in the document"));
        assert_eq!(described["x-vaebox-ops"], json!(every_op), "{name}");
    }
}

/// The document validates with openapi-spec-validator (PyPI), as client generators check it: every
/// operationId unique (`list` served both GET /v1/jobs and GET /v1/presets), every schema well formed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_validates_with_a_real_validator() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let (status, document) = get_json(&client(), &server.url("/openapi.json")).await;
    assert_eq!(status, 200);
    let path = dir.path().join("openapi.json");
    std::fs::write(&path, document.to_string()).unwrap();
    let out = std::process::Command::new(python())
        .args(["-c", "import sys; from openapi_spec_validator import validate; from openapi_spec_validator.readers import read_from_filename; validate(read_from_filename(sys.argv[1])[0]); print('valid')"])
        .arg(&path)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.trim() == "valid", "/openapi.json does not validate:\n{stdout}{stderr}");
    let ids: Vec<&str> = document["paths"].as_object().unwrap().values().flat_map(|path| path.as_object().unwrap().values()).filter_map(|op| op["operationId"].as_str()).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique.len(), "operationIds used twice: {ids:?}");
}
