//! The one place errors become HTTP responses:
//! `{"error": {"code": ..., "message": ..., "field": ...}}` with the right status.

use crate::model::FieldError;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

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
    pub fn internal(message: impl std::fmt::Display) -> Self {
        tracing::error!(error = %message, "request failed");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"code": self.code, "message": self.message});
        if let Some(f) = self.field {
            body["field"] = json!(f);
        }
        let mut resp = (self.status, Json(json!({ "error": body }))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

impl From<crate::engine::EngineError> for ApiError {
    fn from(e: crate::engine::EngineError) -> Self {
        use crate::core::scheduler::OpError;
        match e {
            crate::engine::EngineError::Op(OpError::NotFound(k)) => ApiError::not_found(format!("no task {k}")),
            crate::engine::EngineError::Op(e @ OpError::NotDeadLettered(_)) => {
                ApiError::conflict("not_dead_lettered", e.to_string())
            }
            crate::engine::EngineError::Op(e @ OpError::InFlight(_)) => ApiError::conflict("in_flight", e.to_string()),
            other => ApiError::internal(other),
        }
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
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text()))?;
        parse_json(&bytes).map(JsonBody)
    }
}

pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::new(StatusCode::BAD_REQUEST, "bad_json", format!("invalid JSON: {inner}"));
        }
        let field = if path == "." { String::new() } else { path };
        let msg = strip_position(&inner.to_string());
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid",
            message: if field.is_empty() {
                msg
            } else {
                format!("{field}: {msg}")
            },
            field: Some(field),
        }
    })
}

fn strip_position(s: &str) -> String {
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s.to_string(),
    }
}
