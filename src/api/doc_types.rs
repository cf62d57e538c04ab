//! Types that only describe the API in its OpenAPI document (`Faults`, `Binary`, ..) and a helper that tidies
//! the schemas utoipa makes. The handlers name these in their `#[utoipa::path]`s and `openapi` lists the
//! handlers, so they live here, below both, where neither has to import the other.
use utoipa::openapi::schema::{ArrayItems, KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::RefOr;
use utoipa::IntoResponses;

use super::error::ErrorBody;

/// The error answers of every operation that reads input and the job store.
#[derive(IntoResponses)]
#[allow(dead_code)] // described, never built: `ApiError` makes the answers
pub enum Faults {
    /// Bad input: `{error: {code, message}}` with a stable code
    #[response(status = "4XX")]
    BadInput(ErrorBody),
    /// Server fault
    #[response(status = "5XX")]
    ServerFault(ErrorBody),
}

/// Server fault (the job store failed)
#[derive(IntoResponses)]
#[response(status = "5XX")]
#[allow(dead_code)] // described, never built
pub struct ServerFault(ErrorBody);

/// Raw bytes: a file or a tensor.
pub struct Binary;

impl utoipa::PartialSchema for Binary {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new().schema_type(Type::String).format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary))).into()
    }
}

impl utoipa::ToSchema for Binary {}

/// Replaces a one-item `oneOf` by its item, keeping its description and default (see `openapi`).
pub(super) fn unwrap_one_item_one_ofs(schema: &mut RefOr<Schema>) {
    let RefOr::T(inner) = schema else { return };
    match inner {
        Schema::Object(object) => object.properties.values_mut().for_each(unwrap_one_item_one_ofs),
        Schema::Array(array) => {
            if let ArrayItems::RefOrSchema(items) = &mut array.items {
                unwrap_one_item_one_ofs(items);
            }
        }
        Schema::OneOf(one_of) => {
            one_of.items.iter_mut().for_each(unwrap_one_item_one_ofs);
            if one_of.items.len() != 1 {
                return;
            }
            let (description, default) = (one_of.description.take(), one_of.default.take());
            let mut only = one_of.items.pop().expect("one item");
            match &mut only {
                RefOr::T(Schema::Object(object)) => {
                    object.description = description.or(object.description.take());
                    object.default = default.or(object.default.take());
                }
                RefOr::T(Schema::OneOf(inner)) => inner.description = description.or(inner.description.take()),
                RefOr::Ref(reference) => reference.description = description.unwrap_or_default(),
                _ => {}
            }
            *schema = only;
        }
        _ => {}
    }
}
