//! Every JSON answer the shared helpers read is checked against the OpenAPI document the server serves
//! (`api::openapi::ApiDoc`): the schema the document gives that route, method and status, validated by the
//! `jsonschema` crate (JSON Schema 2020-12, which OpenAPI 3.1 schemas are).
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use serde_json::{json, Value};
use utoipa::OpenApi;

static DOCUMENT: LazyLock<Value> = LazyLock::new(|| serde_json::to_value(vaebox::api::openapi::ApiDoc::openapi()).unwrap());

/// Compiled validators by the response schema they check (as JSON text).
static VALIDATORS: LazyLock<Mutex<HashMap<String, std::sync::Arc<jsonschema::Validator>>>> = LazyLock::new(Default::default);

/// The documented path (`/v1/jobs/{id}`) that serves `path` (`/v1/jobs/5c0…`).
fn route_of<'a>(doc: &'a Value, path: &str) -> Option<&'a str> {
    let segments: Vec<&str> = path.split('/').collect();
    doc["paths"].as_object()?.keys().map(String::as_str).find(|template| {
        let parts: Vec<&str> = template.split('/').collect();
        parts.len() == segments.len()
            && parts.iter().zip(&segments).all(|(part, segment)| part == segment || (part.starts_with('{') && part.ends_with('}')))
    })
}

/// The schema of a JSON answer: the status's own response, else its range (`4XX`), else `default`. An
/// answer the server gives on no documented route (an unknown path) must be the documented error.
fn response_schema(method: &str, path: &str, status: u16) -> Result<Value, String> {
    let doc = &*DOCUMENT;
    let Some(route) = route_of(doc, path) else {
        return if status >= 400 {
            Ok(json!({ "$ref": "#/components/schemas/Error" }))
        } else {
            Err(format!("{method} {path} answered {status}, but the path is not in /openapi.json"))
        };
    };
    let operation = &doc["paths"][route][method.to_ascii_lowercase()];
    if !operation.is_object() {
        // A method the route does not take: the document has nothing to say but that errors are `Error`s.
        return if status >= 400 {
            Ok(json!({ "$ref": "#/components/schemas/Error" }))
        } else {
            Err(format!("{method} {route} answered {status}, but /openapi.json has no {method} there"))
        };
    }
    let responses = &operation["responses"];
    let range = format!("{}XX", status / 100);
    let response = [status.to_string(), range, "default".to_string()]
        .iter()
        .map(|key| &responses[key])
        .find(|response| response.is_object())
        .ok_or_else(|| format!("{method} {route} answered {status}, which /openapi.json does not document"))?;
    response["content"]["application/json"]["schema"]
        .as_object()
        .map(|schema| Value::Object(schema.clone()))
        .ok_or_else(|| format!("{method} {route} answered {status} with JSON, documented without a JSON body"))
}

/// Panics, naming each violation, when `body` (a JSON answer) is not what /openapi.json promises.
pub fn check(method: &str, url: &str, status: u16, body: &Value) {
    let path = url.split("://").nth(1).and_then(|rest| rest.find('/').map(|at| &rest[at..])).unwrap_or(url);
    let path = path.split(['?', '#']).next().unwrap();
    let schema = response_schema(method, path, status).unwrap_or_else(|why| panic!("{why}: {body}"));
    let key = schema.to_string();
    let validator = {
        let mut cache = VALIDATORS.lock().unwrap();
        cache
            .entry(key)
            .or_insert_with(|| {
                // The response schema with the document's components beside it, so `#/components/...` resolves.
                let mut rooted = schema.clone();
                rooted["components"] = DOCUMENT["components"].clone();
                std::sync::Arc::new(jsonschema::draft202012::new(&rooted).unwrap_or_else(|e| panic!("{method} {path}: schema does not compile: {e}")))
            })
            .clone()
    };
    let errors: Vec<String> = validator.iter_errors(body).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{method} {path} {status} does not conform to /openapi.json:\n{}\n{body}", errors.join("\n"));
}
