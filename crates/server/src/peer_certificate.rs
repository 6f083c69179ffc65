//! The subject of a client certificate as MongoDB writes it for MONGODB-X509: the relative
//! distinguished names in RFC 2253 order (last RDN of the certificate first), `,` between RDNs
//! and `+` inside a multi-valued one, attribute types by OpenSSL's short names (`CN`, `OU`,
//! `O`, `L`, `ST`, `C`, `DC`, ...) or as dotted OIDs, and values escaped as mongod's
//! `escapeRfc2253`: `, + " \ < > ;` get a backslash, as do a leading space or `#` and a
//! trailing space; bytes outside ASCII are written `\XX`.
//!
//! A user created on `$external` under exactly this string authenticates with the certificate.

use x509_parser::asn1_rs::Tag;
use x509_parser::x509::AttributeTypeAndValue;

/// Characters RFC 2253 escapes anywhere in a value.
const ESCAPED: &[u8] = b",+\"\\<>;";

/// The certificate's subject, or None when the DER does not parse as a certificate.
pub fn subject_of(certificate_der: &[u8]) -> Option<String> {
    let (_, certificate) = x509_parser::parse_x509_certificate(certificate_der).ok()?;
    let relative_names: Vec<_> = certificate.subject().iter().collect();
    let mut subject = String::new();
    for (position, relative_name) in relative_names.iter().rev().enumerate() {
        if position > 0 {
            subject.push(',');
        }
        let attributes: Vec<_> = relative_name.iter().collect();
        for (index, attribute) in attributes.iter().rev().enumerate() {
            if index > 0 {
                subject.push('+');
            }
            subject.push_str(&short_name(&attribute.attr_type().to_id_string()));
            subject.push('=');
            subject.push_str(&escape(&value_bytes(attribute)));
        }
    }
    Some(subject)
}

/// OpenSSL's short name for an attribute type; unknown types keep their dotted OID.
fn short_name(oid: &str) -> String {
    let name = match oid {
        "2.5.4.3" => "CN",
        "2.5.4.4" => "SN",
        "2.5.4.5" => "serialNumber",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "street",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.12" => "title",
        "2.5.4.15" => "businessCategory",
        "2.5.4.17" => "postalCode",
        "2.5.4.41" => "name",
        "2.5.4.42" => "GN",
        "2.5.4.43" => "initials",
        "2.5.4.44" => "generationQualifier",
        "2.5.4.46" => "dnQualifier",
        "2.5.4.65" => "pseudonym",
        "2.5.4.97" => "organizationIdentifier",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        "1.2.840.113549.1.9.1" => "emailAddress",
        other => return other.to_string(),
    };
    name.to_string()
}

/// The value's characters as UTF-8 bytes: BMPString (UTF-16) and UniversalString (UTF-32) are
/// converted, as mongod normalises them; other string types are taken as they are.
fn value_bytes(attribute: &AttributeTypeAndValue<'_>) -> Vec<u8> {
    let raw = attribute.as_slice();
    match attribute.attr_value().tag() {
        Tag::BmpString => {
            let units: Vec<u16> = raw.chunks_exact(2).map(|pair| u16::from_be_bytes([pair[0], pair[1]])).collect();
            String::from_utf16_lossy(&units).into_bytes()
        }
        Tag::UniversalString => raw
            .chunks_exact(4)
            .map(|quad| char::from_u32(u32::from_be_bytes([quad[0], quad[1], quad[2], quad[3]])).unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect::<String>()
            .into_bytes(),
        _ => raw.to_vec(),
    }
}

/// mongod's `escapeRfc2253`.
fn escape(value: &[u8]) -> String {
    let mut escaped = String::with_capacity(value.len());
    for (index, &byte) in value.iter().enumerate() {
        if byte >= 0x80 {
            escaped.push_str(&format!("\\{byte:02X}"));
            continue;
        }
        let leading = index == 0 && (byte == b' ' || byte == b'#');
        let trailing = index + 1 == value.len() && index > 0 && byte == b' ';
        if leading || trailing || ESCAPED.contains(&byte) {
            escaped.push('\\');
        }
        escaped.push(char::from(byte));
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_as_mongod_escapes_them() {
        assert_eq!(escape(b"plain"), "plain");
        assert_eq!(escape(b"a,b+c\"d\\e<f>g;h"), "a\\,b\\+c\\\"d\\\\e\\<f\\>g\\;h");
        assert_eq!(escape(b" lead"), "\\ lead");
        assert_eq!(escape(b"#hash"), "\\#hash");
        assert_eq!(escape(b"trail "), "trail\\ ");
        assert_eq!(escape("é".as_bytes()), "\\C3\\A9");
        assert_eq!(escape(b""), "");
    }

    #[test]
    fn known_types_get_short_names() {
        assert_eq!(short_name("2.5.4.3"), "CN");
        assert_eq!(short_name("0.9.2342.19200300.100.1.25"), "DC");
        assert_eq!(short_name("1.2.3.4"), "1.2.3.4");
    }

    #[test]
    fn a_certificate_subject_reads_last_name_first() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("parameters");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CountryName, "US");
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "Myriad, Inc.");
        params.distinguished_name.push(rcgen::DnType::OrganizationalUnitName, "Testers");
        params.distinguished_name.push(rcgen::DnType::CommonName, "client one");
        let certificate = params.self_signed(&key).expect("certificate");
        let subject = subject_of(certificate.der()).expect("parses");
        assert_eq!(subject, "CN=client one,OU=Testers,O=Myriad\\, Inc.,C=US");
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert_eq!(subject_of(b"not a certificate"), None);
    }
}
