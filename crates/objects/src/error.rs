//! The store's errors, each with the S3 error code and HTTP status it is answered with.

use http::StatusCode;

/// What went wrong with a request to the store.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The request is not signed with credentials this store issued: {0}
    #[error("the request is not signed with credentials this store issued: {0}")]
    AccessDenied(String),
    /// The signature does not match the request: {0}
    #[error("the signature does not match the request: {0}")]
    SignatureDoesNotMatch(String),
    /// The request's time is too far from the store's clock
    #[error("the request's time is too far from the store's clock")]
    RequestTimeTooSkewed,
    /// The body does not hash to the signed payload hash
    #[error("the body does not hash to the signed payload hash")]
    BadDigest,
    /// No such bucket {0:?}: this store serves one bucket
    #[error("no such bucket {0:?}: this store serves one bucket")]
    NoSuchBucket(String),
    /// No such key {0:?}
    #[error("no such key {0:?}")]
    NoSuchKey(String),
    /// No such multipart upload {0:?}
    #[error("no such multipart upload {0:?}")]
    NoSuchUpload(String),
    /// Invalid part: {0}
    #[error("invalid part: {0}")]
    InvalidPart(String),
    /// The object would be larger than {max} bytes
    #[error("the object would be larger than {max} bytes")]
    EntityTooLarge { max: u64 },
    /// The request is malformed
    #[error("{0}")]
    InvalidRequest(String),
    /// What the store does not do
    #[error("{0}")]
    NotImplemented(String),
    /// Reading or writing the store's files: {what}
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl ObjectError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ObjectError {
        let what = what.into();
        move |source| ObjectError::Io { what, source }
    }

    /// The S3 error code.
    pub fn code(&self) -> &'static str {
        match self {
            ObjectError::AccessDenied(_) => "AccessDenied",
            ObjectError::SignatureDoesNotMatch(_) => "SignatureDoesNotMatch",
            ObjectError::RequestTimeTooSkewed => "RequestTimeTooSkewed",
            ObjectError::BadDigest => "XAmzContentSHA256Mismatch",
            ObjectError::NoSuchBucket(_) => "NoSuchBucket",
            ObjectError::NoSuchKey(_) => "NoSuchKey",
            ObjectError::NoSuchUpload(_) => "NoSuchUpload",
            ObjectError::InvalidPart(_) => "InvalidPart",
            ObjectError::EntityTooLarge { .. } => "EntityTooLarge",
            ObjectError::InvalidRequest(_) => "InvalidRequest",
            ObjectError::NotImplemented(_) => "NotImplemented",
            ObjectError::Io { .. } => "InternalError",
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ObjectError::AccessDenied(_)
            | ObjectError::SignatureDoesNotMatch(_)
            | ObjectError::RequestTimeTooSkewed => StatusCode::FORBIDDEN,
            ObjectError::NoSuchBucket(_)
            | ObjectError::NoSuchKey(_)
            | ObjectError::NoSuchUpload(_) => StatusCode::NOT_FOUND,
            ObjectError::BadDigest
            | ObjectError::InvalidPart(_)
            | ObjectError::EntityTooLarge { .. }
            | ObjectError::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            ObjectError::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            ObjectError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}
