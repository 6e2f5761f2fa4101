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

    pub fn as_url(&self) -> &url::Url {
        &self.0
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
