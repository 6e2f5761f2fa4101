//! Who is calling. Every route but `/healthz` and `/readyz` needs a
//! principal: an API token (`Authorization: Bearer …`) now, a browser session
//! later; handlers see only [`Principal`], so both kinds fit the same layer.

use super::AppState;
use super::error::ApiError;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

#[derive(Debug, Clone, PartialEq)]
pub enum Principal {
    Token { id: String, name: String },
}

impl Principal {
    /// Who did it, for logs and events.
    pub fn actor(&self) -> String {
        match self {
            Principal::Token { name, id } => format!("token:{name}({id})"),
        }
    }
}

fn bearer(req: &Request) -> Option<&str> {
    let v = req.headers().get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}

pub async fn require_auth(State(app): State<AppState>, mut req: Request, next: Next) -> Result<Response, ApiError> {
    let Some(token) = bearer(&req).map(str::to_owned) else {
        return Err(ApiError::unauthorized());
    };
    let store = app.shared.store.clone();
    let found = tokio::task::spawn_blocking(move || store.verify_token(&token))
        .await
        .map_err(ApiError::internal)??;
    let Some(info) = found else {
        return Err(ApiError::unauthorized());
    };
    req.extensions_mut().insert(Principal::Token {
        id: info.id,
        name: info.name,
    });
    Ok(next.run(req).await)
}
