//! The cold tier's S3 backend (feature `s3`): any S3-compatible endpoint through object_store's
//! AWS client, with upload checksums, timeouts and retries.

use std::sync::Arc;

use object_store::aws::{AmazonS3Builder, Checksum};
use object_store::{ClientOptions, RetryConfig};

use super::{ColdError, ColdStore, ColdTimeouts, UploadCheck};

/// Settings for an S3-compatible cold store (`S3Config::new(bucket).with_endpoint(...)`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct S3Config {
    /// Bucket name.
    pub bucket: String,
    /// Endpoint URL, e.g. `http://127.0.0.1:9000` (None = AWS).
    pub endpoint: Option<String>,
    /// Region (`us-east-1` when None).
    pub region: Option<String>,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Allow plain-HTTP endpoints. Default `false`.
    pub allow_http: bool,
    /// Send a SHA-256 checksum of every upload (`x-amz-checksum-sha256`), which the server
    /// checks against the body it received; uploads are then checked by size only
    /// ([`UploadCheck::Size`]). Default `true`; `false` for a server that refuses the header
    /// (uploads are then read back, [`UploadCheck::ReadBack`]).
    pub checksum: bool,
    /// Timeouts and retries of every request. Default [`ColdTimeouts::default`].
    pub timeouts: ColdTimeouts,
}

with_setters!(S3Config {
    with_endpoint => endpoint: Option<String>,
    with_region => region: Option<String>,
    with_access_key_id => access_key_id: Option<String>,
    with_secret_access_key => secret_access_key: Option<String>,
    with_allow_http => allow_http: bool,
    with_checksum => checksum: bool,
    with_timeouts => timeouts: ColdTimeouts,
});

impl S3Config {
    /// Settings for `bucket` on AWS (set the endpoint for any other S3-compatible server).
    pub fn new(bucket: impl Into<String>) -> Self {
        Self {
            bucket: bucket.into(),
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            allow_http: false,
            checksum: true,
            timeouts: ColdTimeouts::default(),
        }
    }
}

impl ColdStore {
    /// An S3-compatible cold store (path-style requests, so any endpoint works), with the
    /// configuration's timeouts, retries and upload checksums.
    pub fn s3(config: &S3Config) -> Result<Self, ColdError> {
        let t = config.timeouts;
        t.validate()?;
        let client = ClientOptions::new()
            .with_allow_http(config.allow_http)
            .with_connect_timeout(t.connect)
            .with_timeout(t.request);
        let retry = RetryConfig {
            max_retries: t.retries,
            retry_timeout: t.deadline,
            ..RetryConfig::default()
        };
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&config.bucket)
            .with_region(config.region.as_deref().unwrap_or("us-east-1"))
            .with_client_options(client)
            .with_retry(retry)
            .with_virtual_hosted_style_request(false);
        if config.checksum {
            builder = builder.with_checksum_algorithm(Checksum::SHA256);
        }
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(key) = &config.access_key_id {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = &config.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        let store = builder.build()?;
        let check = if config.checksum {
            UploadCheck::Size
        } else {
            UploadCheck::ReadBack
        };
        Self::new(Arc::new(store), format!("s3://{}", config.bucket))
            .with_upload_check(check)
            .with_deadline(t.deadline)
    }

    /// The store an `s3://bucket?...` URL names (see [`ColdStore::from_url`]).
    pub(super) fn from_s3_url(parsed: &url::Url, url: &str) -> Result<Self, ColdError> {
        let bucket = parsed
            .host_str()
            .ok_or_else(|| ColdError::Config(format!("{url}: no bucket")))?;
        let query = |name: &str| {
            parsed
                .query_pairs()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.into_owned())
        };
        let env = |name: &str| std::env::var(name).ok();
        let endpoint = query("endpoint").or_else(|| env("AWS_ENDPOINT_URL"));
        let config = S3Config {
            bucket: bucket.to_string(),
            allow_http: query("allow_http").as_deref() == Some("true")
                || endpoint
                    .as_deref()
                    .is_some_and(|e| e.starts_with("http://")),
            endpoint,
            region: query("region").or_else(|| env("AWS_REGION")),
            access_key_id: query("access_key_id").or_else(|| env("AWS_ACCESS_KEY_ID")),
            secret_access_key: query("secret_access_key").or_else(|| env("AWS_SECRET_ACCESS_KEY")),
            checksum: query("checksum").as_deref() != Some("false"),
            timeouts: ColdTimeouts::default().with_query(query)?,
        };
        Self::s3(&config)
    }
}
