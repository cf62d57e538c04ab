//! The OpenAPI document, generated from the handlers' `#[utoipa::path]`s and the types they serve, and
//! the `/docs` page: Swagger UI, whose script and style are built into the binary (no network needed).
use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use axum::Router;
use utoipa::openapi::RefOr;
use utoipa::{Modify, OpenApi};

use super::error::ErrorBody;
use super::doc_types::unwrap_one_item_one_ofs;
// Where the handlers' doc types were defined first; they live beside this file so the handlers need not import it.
pub use super::doc_types::{Binary, Faults, ServerFault};
use super::{jobs, preview, remote, system};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "vaebox",
        description = "A LAN-shared GPU box for video VAEs and upscaling. Jobs are queued in SQLite and run one at a time. \
            Errors are `{error: {code, message}}` with a stable code (the Error schema lists them all); a parameter an endpoint \
            does not take is refused with 400 unknown-parameter naming it, a path that is not here answers 404 not-found, and a \
            method a path does not take 405 method-not-allowed with an Allow header. A POST or DELETE that a browser sends from a page \
            of another origin is refused with 403 foreign-origin unless the box's cors_origins lists that origin; requests without an \
            Origin header (curl, scripts) are not affected."
    ),
    paths(
        jobs::create,
        jobs::list,
        jobs::get,
        jobs::delete,
        jobs::events,
        jobs::result,
        preview::thumbnail,
        preview::preview,
        jobs::cancel,
        jobs::pause,
        jobs::estimate,
        jobs::resume,
        jobs::whole,
        remote::decode,
        remote::encode,
        system::models,
        super::presets::list,
        system::healthz,
        system::metrics,
        document,
        docs,
        system::index,
        system::script_module,
        system::style_css,
    ),
    components(schemas(ErrorBody)),
    modifiers(&UnwrapOneItemOneOfs, &EveryRouteCanRefuse, &TokensAsBearer),
    tags(
        (name = "jobs", description = "Upload a video or latent, follow the job, download the result"),
        (name = "remote VAE", description = "diffusers' remote_decode / remote_encode, answered when the job finishes"),
        (name = "box", description = "Health, models and metrics"),
        (name = "pages", description = "The web page, this document and its reference page"),
    )
)]
pub struct ApiDoc;

/// The checks in front of every route (the Host name, the token, the Origin of a browser's POST) can refuse
/// any request, the page and `/healthz` included; each operation that does not say so itself gets a `4XX`.
struct EveryRouteCanRefuse;

impl Modify for EveryRouteCanRefuse {
    fn modify(&self, document: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let refusal = ResponseBuilder::new()
            .description("Refused before the handler: unknown-host (403), unauthorized (401) when tokens are configured, foreign-origin (403)")
            .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("Error"))).build())
            .build();
        for item in document.paths.paths.values_mut() {
            for operation in [&mut item.get, &mut item.post, &mut item.delete].into_iter().flatten() {
                operation.responses.responses.entry("4XX".to_string()).or_insert_with(|| RefOr::T(refusal.clone()));
            }
        }
    }
}

/// The security scheme `/v1/*` calls name (`auth`): `Authorization: Bearer <secret>` on a box with `tokens`
/// (Swagger UI's Authorize button then sends it with every "Try it out"). The page, `/healthz`, `/metrics`
/// and this document stay open, so only the `/v1/` operations require it.
struct TokensAsBearer;

/// The scheme's name in `components.securitySchemes`.
pub const BEARER_SCHEME: &str = "bearer";

impl Modify for TokensAsBearer {
    fn modify(&self, document: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "On a box with `tokens` configured, every `/v1/` call sends `Authorization: Bearer <secret>` (HTTP Basic with the \
                 secret as the password works too, and a GET may carry `?access_token=<secret>`); 401 `unauthorized` otherwise. \
                 A box without tokens takes calls without it.",
            ))
            .build();
        document.components.get_or_insert_with(Default::default).add_security_scheme(BEARER_SCHEME, SecurityScheme::Http(scheme));
        for (path, item) in document.paths.paths.iter_mut() {
            if !path.starts_with("/v1/") {
                continue;
            }
            for operation in [&mut item.get, &mut item.post, &mut item.delete].into_iter().flatten() {
                operation.security = Some(vec![SecurityRequirement::new(BEARER_SCHEME, Vec::<String>::new())]);
            }
        }
    }
}

/// utoipa hangs the description or default of an inlined schema on a one-item `oneOf` around it; the schema
/// itself reads better, and Swagger UI then offers an enum as a list.
struct UnwrapOneItemOneOfs;

impl Modify for UnwrapOneItemOneOfs {
    fn modify(&self, document: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = &mut document.components {
            components.schemas.values_mut().for_each(unwrap_one_item_one_ofs);
        }
        for item in document.paths.paths.values_mut() {
            for operation in [&mut item.get, &mut item.post, &mut item.delete].into_iter().flatten() {
                for parameter in operation.parameters.iter_mut().flatten() {
                    parameter.schema.iter_mut().for_each(unwrap_one_item_one_ofs);
                }
            }
        }
    }
}

/// The OpenAPI document (this one)
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "pages",
    responses((status = 200, description = "OpenAPI 3.1", body = Object, content_type = "application/json"))
)]
pub async fn document() -> impl IntoResponse {
    static DOCUMENT: LazyLock<String> = LazyLock::new(|| ApiDoc::openapi().to_pretty_json().expect("the document serialises"));
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT.as_str())
}

/// The API reference page
///
/// Swagger UI rendering /openapi.json; its script and style are served beside it, from the binary.
#[utoipa::path(
    get,
    path = "/docs",
    tag = "pages",
    responses((status = 200, description = "HTML", body = String, content_type = "text/html"))
)]
#[allow(dead_code)] // the route is swagger_ui_dist's own (see `docs_routes`); this only describes it
fn docs() {}

/// `/docs` and the files its page loads (`/docs/swagger-ui-bundle.js`, `/docs/swagger-ui.css`).
pub fn docs_routes() -> Router {
    swagger_ui_dist::generate_routes(swagger_ui_dist::ApiDefinition {
        uri_prefix: "/docs",
        api_definition: swagger_ui_dist::OpenApiSource::Uri("/openapi.json"),
        title: Some("vaebox API"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn the_v1_operations_take_a_bearer_token_and_the_pages_stay_open() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let scheme = &doc["components"]["securitySchemes"][BEARER_SCHEME];
        assert_eq!((scheme["type"].as_str(), scheme["scheme"].as_str()), (Some("http"), Some("bearer")), "{scheme}");
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let security = &operation["security"];
                if path.starts_with("/v1/") {
                    assert_eq!(security, &serde_json::json!([{ BEARER_SCHEME: [] }]), "{method} {path}");
                } else {
                    assert!(security.is_null(), "{method} {path} is open to every caller: {security}");
                }
            }
        }
    }

    #[test]
    fn the_document_lists_every_error_code() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let listed = &doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"];
        assert_eq!(listed, &serde_json::json!(crate::error_codes::ALL));
    }

    /// What /openapi.json lists is exactly what each endpoint takes, no more and no less.
    #[test]
    fn the_openapi_document_lists_the_names_each_endpoint_takes() {
        use crate::api::params::{field_names, JobFields, ListQuery, RemoteQuery};
        use std::collections::BTreeSet;
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let listed = |path: &str, method: &str| -> BTreeSet<String> {
            let parameters = doc["paths"][path][method]["parameters"].as_array().unwrap();
            parameters.iter().filter(|p| p["in"] == "query").map(|p| p["name"].as_str().unwrap().to_string()).collect()
        };
        let taken = |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| n.to_string()).collect() };
        assert_eq!(listed("/v1/jobs", "post"), taken(field_names::<JobFields>()));
        assert_eq!(listed("/v1/jobs", "get"), taken(field_names::<ListQuery>()));
        assert_eq!(listed("/v1/decode", "post"), taken(field_names::<RemoteQuery>()));
        assert_eq!(listed("/v1/encode", "post"), taken(field_names::<RemoteQuery>()));
        let form = &doc["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]["$ref"];
        let form = form.as_str().unwrap().strip_prefix("#/components/schemas/").unwrap();
        let form = &doc["components"]["schemas"][form];
        assert_eq!(form["required"], serde_json::json!(["file"]));
        let form: BTreeSet<String> =
            form["properties"].as_object().unwrap().keys().filter(|k| *k != "file" && *k != "params").cloned().collect();
        let mut fields = taken(field_names::<JobFields>());
        fields.remove("filename");
        assert_eq!(form, fields);
    }

    fn nodes<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
        match value {
            Value::Object(map) => {
                out.push(value);
                map.values().for_each(|v| nodes(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| nodes(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_resolves_and_no_one_item_one_of_is_left() {
        let document = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let schemas = document["components"]["schemas"].as_object().unwrap();
        let mut all = Vec::new();
        nodes(&document, &mut all);
        let references: Vec<&str> = all.iter().filter_map(|node| node.get("$ref")?.as_str()).collect();
        assert!(references.len() > 20, "{references:?}");
        for reference in references {
            let name = reference.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{reference}"));
            assert!(schemas.contains_key(name), "{reference} points nowhere");
        }
        for node in &all {
            if let Some(items) = node.get("oneOf") {
                assert!(items.as_array().unwrap().len() > 1, "a one-item oneOf is left: {node}");
            }
        }
    }
}
