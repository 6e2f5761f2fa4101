//! API tokens made and revoked from the Security page, each with its
//! change event.

use super::Context;
use super::error::ServiceError;
use super::with_store;
use crate::sink::event::Event;
use crate::store::{TokenInfo, TokenScope};

/// A new token named `name`: its plain text (shown once) and what is
/// stored of it.
pub async fn create(
    cx: &Context,
    name: &str,
    scope: TokenScope,
    actor: &str,
) -> Result<(String, TokenInfo), ServiceError> {
    let (sink, now, who) = (cx.sink.clone(), cx.engine.now(), actor.to_string());
    let event = move |info: &TokenInfo| {
        let target = format!("{}({})", info.name, info.id);
        let e = Event::operator(now, &who, "token.create", &target);
        sink.stage(&e).into_iter().collect()
    };
    let n = name.to_string();
    let (plain, info) = with_store(cx, move |s| s.create_token_with_events(&n, scope, now, event)).await?;
    tracing::info!(token = %info.id, name = %name, scope = info.scope.as_str(), actor, "API token created");
    Ok((plain, info))
}

/// Revoke the token `id`; `false` when there is none.
pub async fn revoke(cx: &Context, id: &str, actor: &str) -> Result<bool, ServiceError> {
    let event = Event::operator(cx.engine.now(), actor, "token.revoke", id);
    let events: Vec<_> = cx.sink.stage(&event).into_iter().collect();
    let i = id.to_string();
    let revoked = with_store(cx, move |s| s.revoke_token_with_events(&i, &events)).await?;
    if revoked {
        tracing::info!(token = %id, actor, "API token revoked");
    }
    Ok(revoked)
}

/// Every token, as stored (never its plaintext), oldest first.
pub async fn list(cx: &Context) -> Result<Vec<TokenInfo>, ServiceError> {
    with_store(cx, |s| s.list_tokens()).await
}
