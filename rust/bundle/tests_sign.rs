//! Signed bundles: keys, the signature section, and refusal of anything that is unsigned,
//! signed by another key, or changed after signing.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::format::{read_u64, trailer_hash, HEADER_LEN, TRAILER_LEN, VERSION_SIGNED};
use super::tests::{digest_of, write_bundle};
use super::*;
use crate::error::Error;

fn key(dir: &Path, name: &str) -> SecretKey {
    SecretKey::generate(&dir.join(name)).unwrap()
}

fn trust(keys: &[&SecretKey]) -> TrustedKeys {
    let texts: Vec<String> = keys.iter().map(|k| k.public().to_string()).collect();
    TrustedKeys::from_specs(&texts).unwrap()
}

fn write_signed(dir: &Path, signer: &SecretKey) -> (std::path::PathBuf, Vec<Vec<u8>>) {
    let blobs: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 100 + 5000 * i as usize]).collect();
    let path = dir.join("signed.bundle");
    let mut writer = BundleWriter::create(&path).unwrap();
    for blob in &blobs {
        writer.add_blob(digest_of(blob), blob).unwrap();
    }
    writer.add_ref("dynamo/a", digest_of(&blobs[0])).unwrap();
    writer.add_ref("dynamo/b", digest_of(&blobs[3])).unwrap();
    writer.finish_signed(Some(signer)).unwrap();
    (path, blobs)
}

fn untrusted(result: Result<Bundle, Error>) -> String {
    match result {
        Err(Error::Untrusted(msg)) => msg,
        other => panic!("expected Untrusted, got {other:?}"),
    }
}

#[test]
fn signed_bundles_round_trip_and_name_their_signer() {
    let dir = tempfile::tempdir().unwrap();
    let alice = key(dir.path(), "alice.key");
    let (path, blobs) = write_signed(dir.path(), &alice);
    let bytes = fs::read(&path).unwrap();
    assert_eq!(format::read_u32(&bytes, 8), VERSION_SIGNED);

    let bundle = Bundle::open_trusted(&path, Some(&trust(&[&alice]))).unwrap();
    assert_eq!(bundle.signer(), Some(&alice.public()));
    for blob in &blobs {
        assert_eq!(bundle.get(&digest_of(blob)).unwrap(), &blob[..]);
    }
    assert!(bundle.verify_all(true).unwrap().corrupt.is_empty());
    // Without trust a signed bundle still opens, and its signature is still checked.
    assert_eq!(Bundle::open(&path).unwrap().signer(), Some(&alice.public()));
}

#[test]
fn unsigned_bundles_stay_version_1_and_are_refused_when_trust_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = vec![b"one".to_vec(), b"two".to_vec()];
    let path = write_bundle(dir.path(), &blobs, &[("dynamo/x".into(), 0)]);
    let bytes = fs::read(&path).unwrap();
    assert_eq!(format::read_u32(&bytes, 8), format::VERSION);
    assert!(bytes[88..HEADER_LEN].iter().all(|&b| b == 0));
    assert_eq!(Bundle::open(&path).unwrap().signer(), None);

    let alice = key(dir.path(), "alice.key");
    assert!(untrusted(Bundle::open_trusted(&path, Some(&trust(&[&alice])))).contains("not signed"));
    // An empty set trusts nothing.
    let nobody = TrustedKeys::from_specs::<&str>(&[]).unwrap();
    untrusted(Bundle::open_trusted(&path, Some(&nobody)));
}

#[test]
fn another_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let alice = key(dir.path(), "alice.key");
    let mallory = key(dir.path(), "mallory.key");
    let (path, _) = write_signed(dir.path(), &mallory);
    let msg = untrusted(Bundle::open_trusted(&path, Some(&trust(&[&alice]))));
    assert!(msg.contains(&mallory.public().to_string()), "{msg}");
    Bundle::open_trusted(&path, Some(&trust(&[&alice, &mallory]))).unwrap();
}

/// Flips bytes all over the metadata (every one outside the fan-out table), once as a careless change (trailer left
/// alone) and once as a forger would (trailer recomputed): nothing opens, and every change
/// to the signed index or refs that keeps the layout intact is refused as untrusted.
#[test]
fn any_change_to_signed_metadata_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let alice = key(dir.path(), "alice.key");
    let (path, _) = write_signed(dir.path(), &alice);
    let good = fs::read(&path).unwrap();
    let keys = trust(&[&alice]);
    let index_offset = read_u64(&good, 56) as usize;
    let sig_offset = read_u64(&good, 88) as usize;
    let len = good.len();
    let victim = dir.path().join("victim.bundle");
    // The fan-out table is 2 KiB of counts; a sample of it is enough.
    let fanout_end = index_offset + 256 * 8;
    let offsets = (0..HEADER_LEN)
        .chain((index_offset..fanout_end).step_by(37))
        .chain(fanout_end..len);
    for at in offsets {
        for forge in [false, true] {
            let mut bytes = good.clone();
            bytes[at] ^= 0x01;
            if forge && at < len - TRAILER_LEN {
                let digest = trailer_hash(&bytes[..HEADER_LEN], &bytes[index_offset..sig_offset]);
                bytes[len - TRAILER_LEN..len - 8].copy_from_slice(&digest);
            }
            fs::write(&victim, &bytes).unwrap();
            for trust in [Some(&keys), None] {
                let result = Bundle::open_trusted(&victim, trust);
                assert!(
                    result.is_err(),
                    "flip at {at} (forged: {forge}) was accepted"
                );
                if (index_offset..sig_offset + 8).contains(&at) {
                    untrusted(result);
                }
            }
        }
    }
}

#[test]
fn a_changed_blob_opens_but_fails_its_digest() {
    let dir = tempfile::tempdir().unwrap();
    let alice = key(dir.path(), "alice.key");
    let (path, blobs) = write_signed(dir.path(), &alice);
    let bundle = Bundle::open(&path).unwrap();
    let (offset, _) = bundle.locate(&digest_of(&blobs[2])).unwrap();
    drop(bundle);
    let mut bytes = fs::read(&path).unwrap();
    bytes[offset + 7] ^= 0x80;
    fs::write(&path, &bytes).unwrap();
    // The signature covers the blob by its digest: opening is fine, reading is not.
    let bundle = Bundle::open_trusted(&path, Some(&trust(&[&alice]))).unwrap();
    let report = bundle.verify_all(true).unwrap();
    assert_eq!(report.corrupt, vec![digest_of(&blobs[2])]);
}

#[test]
fn key_files_are_private_and_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signing.key");
    let made = SecretKey::generate(&path).unwrap();
    let meta = fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(sign::SECRET_PREFIX) && text.ends_with('\n'));
    assert_eq!(SecretKey::load(&path).unwrap().public(), made.public());

    let err = SecretKey::generate(&path).unwrap_err();
    assert!(
        matches!(err, Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists),
        "{err}"
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), text);
    // Nor through a symlink planted where the key is to go.
    let link = dir.path().join("link.key");
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).unwrap();
    assert!(SecretKey::generate(&link).is_err());
    assert!(!dir.path().join("elsewhere").exists());

    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(SecretKey::load(&path), Err(Error::InvalidKey(_))));
    // Two keys never come out the same.
    assert_ne!(key(dir.path(), "other.key").public(), made.public());
}

#[test]
fn public_keys_parse_from_text_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let a = key(dir.path(), "a.key").public();
    let b = key(dir.path(), "b.key").public();
    let text = a.to_string();
    assert!(text.starts_with("ed25519:") && text.len() == 8 + 64);
    assert_eq!(PublicKey::parse(&format!("  {text}\n")).unwrap(), a);
    for bad in [
        "",
        "ed25519:",
        "ed25519:zz",
        &text[..70],
        &text.replace("ed25519:", "rsa:"),
        "ed25519:0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        assert!(
            matches!(PublicKey::parse(bad), Err(Error::InvalidKey(_))),
            "{bad:?}"
        );
    }
    let file = dir.path().join("trusted.pub");
    fs::write(&file, format!("# build hosts\n{b}\n\n")).unwrap();
    let keys = TrustedKeys::from_specs(&[text.clone(), file.display().to_string()]).unwrap();
    assert_eq!(keys.keys(), &[a, b]);
    let empty = dir.path().join("empty.pub");
    fs::write(&empty, "# nothing\n").unwrap();
    assert!(TrustedKeys::from_specs(&[empty.display().to_string()]).is_err());
    assert!(TrustedKeys::from_specs(&[dir.path().join("absent").display().to_string()]).is_err());
}

#[test]
fn a_ref_signature_binds_the_name_and_the_digest() {
    let dir = tempfile::tempdir().unwrap();
    let signer = key(dir.path(), "k");
    let other = key(dir.path(), "o");
    let d1 = [1u8; 32];
    let d2 = [2u8; 32];
    let sig = signer.sign_ref("dynamo/env/a", &d1);
    let public = signer.public();
    assert!(public.verify_ref("dynamo/env/a", &d1, &sig));
    // Replayed for another name or digest, or checked under another key: refused.
    assert!(!public.verify_ref("dynamo/env/b", &d1, &sig));
    assert!(!public.verify_ref("dynamo/env/a", &d2, &sig));
    assert!(!other.public().verify_ref("dynamo/env/a", &d1, &sig));
    let mut flipped = sig;
    flipped[5] ^= 1;
    assert!(!public.verify_ref("dynamo/env/a", &d1, &flipped));
    // The length prefix: no two (name, digest) pairs share a message.
    assert_ne!(sign::ref_message("ab", &d1), sign::ref_message("a", &d1));
}

#[test]
fn a_ref_signature_is_never_a_bundle_signature() {
    assert_ne!(sign::REF_CONTEXT, sign::SIGNED_CONTEXT);
    assert!(!sign::ref_message("", &[0u8; 32]).starts_with(sign::SIGNED_CONTEXT));
}

#[test]
fn keygen_leaves_no_temporary_file_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k");
    key(dir.path(), "k");
    let before = fs::read(&path).unwrap();
    assert!(SecretKey::generate(&path).is_err());
    assert_eq!(fs::read(&path).unwrap(), before);
    let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "only the key file remains");
}

#[test]
fn a_trusted_keys_file_others_may_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let signer = key(dir.path(), "k");
    let file = dir.path().join("trusted");
    fs::write(&file, format!("{}\n", signer.public())).unwrap();
    let spec = [file.to_str().unwrap()];
    for mode in [0o666, 0o620, 0o602] {
        fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap();
        match TrustedKeys::from_specs(&spec) {
            Err(Error::Untrusted(msg)) => assert!(msg.contains("writable"), "{msg}"),
            other => panic!("mode {mode:o}: expected Untrusted, got {other:?}"),
        }
    }
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(TrustedKeys::from_specs(&spec).unwrap().keys().len(), 1);
}
