//! The XML documents of the S3 subset, written and read with quick-xml.

use serde::{Deserialize, Serialize};

/// `<Error>`.
#[derive(Serialize)]
#[serde(rename = "Error")]
pub(crate) struct Error<'a> {
    #[serde(rename = "Code")]
    pub code: &'a str,
    #[serde(rename = "Message")]
    pub message: String,
    #[serde(rename = "Resource")]
    pub resource: &'a str,
}

/// The answer to `CreateMultipartUpload`.
#[derive(Serialize)]
#[serde(rename = "InitiateMultipartUploadResult")]
pub(crate) struct Initiated<'a> {
    #[serde(rename = "Bucket")]
    pub bucket: &'a str,
    #[serde(rename = "Key")]
    pub key: &'a str,
    #[serde(rename = "UploadId")]
    pub upload_id: &'a str,
}

/// The answer to `CompleteMultipartUpload`.
#[derive(Serialize)]
#[serde(rename = "CompleteMultipartUploadResult")]
pub(crate) struct Completed<'a> {
    #[serde(rename = "Bucket")]
    pub bucket: &'a str,
    #[serde(rename = "Key")]
    pub key: &'a str,
    #[serde(rename = "ETag")]
    pub etag: String,
}

/// `CompleteMultipartUpload`'s body.
#[derive(Deserialize)]
pub(crate) struct Complete {
    #[serde(rename = "Part", default)]
    pub parts: Vec<PartRef>,
}

/// A part a completion names.
#[derive(Deserialize)]
pub(crate) struct PartRef {
    #[serde(rename = "PartNumber")]
    pub number: u32,
    #[serde(rename = "ETag")]
    pub etag: String,
}

/// `DeleteObjects`' body.
#[derive(Deserialize)]
pub(crate) struct Delete {
    #[serde(rename = "Object", default)]
    pub objects: Vec<ObjectRef>,
}

/// An object a batch delete names.
#[derive(Deserialize)]
pub(crate) struct ObjectRef {
    #[serde(rename = "Key")]
    pub key: String,
}

/// The answer to `DeleteObjects`.
#[derive(Serialize)]
#[serde(rename = "DeleteResult")]
pub(crate) struct DeleteResult {
    #[serde(rename = "Deleted")]
    pub deleted: Vec<Deleted>,
}

/// An object a batch delete deleted.
#[derive(Serialize)]
pub(crate) struct Deleted {
    #[serde(rename = "Key")]
    pub key: String,
}

/// The answer to `ListObjectsV2`.
#[derive(Serialize)]
#[serde(rename = "ListBucketResult")]
pub(crate) struct Listed<'a> {
    #[serde(rename = "Name")]
    pub name: &'a str,
    #[serde(rename = "Prefix")]
    pub prefix: &'a str,
    #[serde(rename = "KeyCount")]
    pub key_count: usize,
    #[serde(rename = "MaxKeys")]
    pub max_keys: usize,
    #[serde(rename = "IsTruncated")]
    pub is_truncated: bool,
    #[serde(
        rename = "NextContinuationToken",
        skip_serializing_if = "Option::is_none"
    )]
    pub next_continuation_token: Option<String>,
    #[serde(rename = "Contents")]
    pub contents: Vec<Contents>,
}

/// An object in a listing.
#[derive(Serialize)]
pub(crate) struct Contents {
    #[serde(rename = "Key")]
    pub key: String,
    #[serde(rename = "LastModified")]
    pub last_modified: String,
    #[serde(rename = "ETag")]
    pub etag: String,
    #[serde(rename = "Size")]
    pub size: u64,
    #[serde(rename = "StorageClass")]
    pub storage_class: &'static str,
}

/// `value` as an XML document.
pub(crate) fn document<T: Serialize>(value: &T) -> String {
    let body = quick_xml::se::to_string(value).expect("the store's documents serialise");
    format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_body_reads_and_an_error_escapes() {
        let body = r#"<?xml version="1.0" encoding="UTF-8"?>
            <CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
              <Part><ETag>"aa"</ETag><PartNumber>1</PartNumber><ChecksumCRC32>x</ChecksumCRC32></Part>
              <Part><PartNumber>2</PartNumber><ETag>&quot;bb&quot;</ETag></Part>
            </CompleteMultipartUpload>"#;
        let complete: Complete = quick_xml::de::from_str(body).unwrap();
        let parts: Vec<_> = complete
            .parts
            .iter()
            .map(|p| (p.number, p.etag.as_str()))
            .collect();
        assert_eq!(parts, vec![(1, "\"aa\""), (2, "\"bb\"")]);
        let error = document(&Error {
            code: "NoSuchKey",
            message: "no <such> key".into(),
            resource: "/b/k&",
        });
        assert!(
            error.contains("<Message>no &lt;such&gt; key</Message>"),
            "{error}"
        );
        assert!(error.contains("<Resource>/b/k&amp;</Resource>"), "{error}");
    }
}
