//! The one place errors become HTTP responses:
//! `{"error": {"code": ..., "message": ..., "field": ...}}` with the right status.

use crate::model::FieldError;
use crate::service::ServiceError;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "authentication required: send `Authorization: Bearer <token>` (create one with `pollster admin create-token`)",
        )
    }
    pub fn invalid(e: FieldError) -> Self {
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid",
            message: e.to_string(),
            field: Some(e.field),
        }
    }
    /// A failure of ours. The detail (a store path, an I/O error) goes to
    /// the log under a request id; the client gets the id and a generic
    /// message, never the detail.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        let id = crate::web::session::random_hex(8);
        tracing::error!(request_id = %id, error = %detail, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("internal error (request id {id}); the server log has the detail"),
        )
    }
}

/// The body of every error answer: `{"error": {...}}`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    #[schema(inline)]
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable, machine-readable name of the error (`not_found`, `invalid`, ...).
    pub code: &'static str,
    pub message: String,
    /// The field or query parameter the error is about, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::web::api::schema::plain_string)]
    pub field: Option<String>,
}

/// The body of a 422 (sent as an [`ErrorBody`]): the error always names
/// the invalid field.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = FieldError)]
pub struct FieldErrorBody {
    #[schema(inline)]
    pub error: FieldErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FieldErrorDetail {
    pub code: &'static str,
    pub message: String,
    /// The invalid field, dotted (`scheduler.workers`); empty for the whole body.
    pub field: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                field: self.field,
            },
        };
        let mut resp = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

/// The one place a service's refusal becomes an HTTP answer. A refusal
/// with several invalid fields answers with the first; [`ApiError::all`]
/// keeps them all (the pages show every one).
impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Invalid(mut errs) if !errs.is_empty() => ApiError::invalid(errs.remove(0)),
            other => ApiError::all(other).remove(0),
        }
    }
}

impl ApiError {
    /// Every error a service's refusal names, as HTTP errors (one, but for
    /// several invalid fields).
    pub fn all(e: ServiceError) -> Vec<ApiError> {
        let one = match e {
            ServiceError::Invalid(errs) if !errs.is_empty() => {
                return errs.into_iter().map(ApiError::invalid).collect();
            }
            ServiceError::Invalid(_) => ApiError::internal("a refusal that names no field"),
            e @ ServiceError::NotFound(_) => ApiError::not_found(e.to_string()),
            ServiceError::Unreadable { field, message } => ApiError {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                code: "invalid",
                message,
                field: Some(field),
            },
            e @ ServiceError::BadJson(_) => ApiError::new(StatusCode::BAD_REQUEST, "bad_json", e.to_string()),
            ServiceError::Conflict { kind, message, field } => ApiError {
                field,
                ..ApiError::conflict(kind.code(), message)
            },
            // The over-budget gate (§2) refuses a change that would push a
            // pool with no profile over its budget target: 409 with the
            // startup gate's message.
            ServiceError::OverBudget(e) => ApiError::conflict("over_budget", e.to_string()),
            ServiceError::Store(e) => ApiError::internal(e),
            ServiceError::Internal(e) => ApiError::internal(e),
            ServiceError::Unavailable(e) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e),
        };
        vec![one]
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        ApiError::internal(e)
    }
}

/// JSON body extractor whose errors name the field and come back as our
/// error shape (axum's default is plain text).
pub struct JsonBody<T>(pub T);

impl<S, T> axum::extract::FromRequest<S> for JsonBody<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(req, state).await.map_err(|e| {
            // The body limit: 413, as for any other body that is too large.
            let status = e.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(status, "too_large", "the request body is larger than 1 MiB")
            } else {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text())
            }
        })?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Read a struct from a document that must be one JSON object: serde would
/// also read an array as the struct's fields in order, which no client means.
pub fn from_json_object<T: serde::de::DeserializeOwned>(doc: &serde_json::Value) -> Result<T, ApiError> {
    crate::service::error::decode_object(doc).map_err(ApiError::from)
}

pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    crate::service::error::decode(bytes).map_err(ApiError::from)
}

/// Query-string extractor whose errors come back as our error shape (axum's
/// default is plain text): a parameter given twice is 400 naming it, a value
/// of the wrong type is 422 naming the parameter.
pub struct QueryParams<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for QueryParams<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, Self::Rejection> {
        parse_query(parts.uri.query().unwrap_or("")).map(QueryParams)
    }
}

pub fn parse_query<T: serde::de::DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let mut seen = std::collections::HashSet::new();
    for (name, _) in form_urlencoded::parse(query.as_bytes()) {
        if !seen.insert(name.clone()) {
            return Err(ApiError {
                field: Some(name.to_string()),
                ..ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_query",
                    format!("query parameter {name:?} is given more than once"),
                )
            });
        }
    }
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            return ApiError::new(StatusCode::BAD_REQUEST, "bad_query", format!("invalid query: {inner}"));
        }
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid",
            message: crate::model::mask_userinfo(&format!("{path}: {inner}")),
            field: Some(path),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_internal_error_names_a_request_id_and_hides_the_detail() {
        let e = ApiError::internal("cannot open /var/lib/pollster/pollster.redb: permission denied");
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!e.message.contains("/var/lib"), "{}", e.message);
        assert!(e.message.contains("request id "), "{}", e.message);
        assert_ne!(e.message, ApiError::internal("x").message, "one id per failure");
    }
}
