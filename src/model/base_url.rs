//! An instance's base URL, parsed once: `http` or `https` with a host.
//! The catalog holds it in this form so a poll never re-parses the config
//! string, and the poller joins each group's path onto it.

use super::FieldError;
use std::fmt;

/// A checked instance URL. Only [`BaseUrl::parse`] makes one, so holding a
/// `BaseUrl` means the scheme and host were checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BaseUrl(url::Url);

impl BaseUrl {
    /// Parse `s` (surrounding whitespace ignored). The error names the
    /// `url` field; its message is what the poller reports for an instance
    /// whose URL does not parse.
    pub fn parse(s: &str) -> Result<BaseUrl, FieldError> {
        let url = url::Url::parse(s.trim()).map_err(|e| FieldError::new("url", s, e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(FieldError::new("url", s, "must be http:// or https:// with a host"));
        }
        Ok(BaseUrl(url))
    }

    /// A URL already checked to be `http` or `https` with a host (by
    /// `InstanceConfig::validate_fields_parsed`).
    pub(crate) fn checked(url: url::Url) -> BaseUrl {
        debug_assert!(matches!(url.scheme(), "http" | "https") && url.host_str().is_some());
        BaseUrl(url)
    }

    pub fn as_url(&self) -> &url::Url {
        &self.0
    }

    /// The URL cut right after the first place its path has `root`'s
    /// segments (`/api/v1` in `https://api.meraki.com/api/v1/organizations/1`
    /// gives `https://api.meraki.com/api/v1`), without query or fragment;
    /// `None` when the path does not have them. A group's `api_root`.
    pub fn under_root(&self, root: &str) -> Option<BaseUrl> {
        let want: Vec<&str> = root.trim_matches('/').split('/').collect();
        let have: Vec<&str> = self.0.path().trim_start_matches('/').split('/').collect();
        let at = have.windows(want.len()).position(|w| w == want.as_slice())?;
        let mut url = self.0.clone();
        url.set_path(&format!("/{}", have[..at + want.len()].join("/")));
        url.set_query(None);
        url.set_fragment(None);
        Some(BaseUrl(url))
    }
}

impl fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_or_https_url_with_a_host_parses() {
        let b = BaseUrl::parse(" https://pve.example:8006/api2/json ").expect("valid");
        assert_eq!(b.to_string(), "https://pve.example:8006/api2/json");
        assert!(BaseUrl::parse("http://127.0.0.1:1/").is_ok());
    }

    #[test]
    fn under_root_cuts_the_url_after_the_roots_segments() {
        let b = BaseUrl::parse("https://api.meraki.com/api/v1/organizations/123?x=1").expect("valid");
        let at = |root: &str| b.under_root(root).map(|u| u.to_string());
        assert_eq!(at("/api/v1").as_deref(), Some("https://api.meraki.com/api/v1"));
        assert_eq!(at("/api").as_deref(), Some("https://api.meraki.com/api"));
        assert_eq!(
            at("/api/v1/organizations/123").as_deref(),
            Some("https://api.meraki.com/api/v1/organizations/123")
        );
        // Whole segments only, and the first place they are.
        assert_eq!(at("/ap"), None);
        assert_eq!(at("/v1/org"), None);
        assert_eq!(at("/api/v2"), None);
        let proxied = BaseUrl::parse("http://proxy:8080/meraki/api/v1/organizations/9").expect("valid");
        assert_eq!(
            proxied.under_root("/api/v1").map(|u| u.to_string()).as_deref(),
            Some("http://proxy:8080/meraki/api/v1")
        );
    }

    #[test]
    fn another_scheme_or_no_host_is_refused_naming_the_field() {
        for bad in ["ftp://host/", "file:///etc/passwd", "mailto:a@b"] {
            let e = BaseUrl::parse(bad).expect_err(bad);
            assert_eq!(e.field, "url");
            assert_eq!(e.message, "must be http:// or https:// with a host", "{bad}");
        }
        let e = BaseUrl::parse("not a url").expect_err("no scheme");
        assert_eq!(e.message, "relative URL without a base");
    }
}
