from pathlib import Path

from prx_data.ingest.registry import load_registry


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_valid_and_bad_specs_are_separated(tmp_path):
    write(tmp_path, "good.yaml", "name: good\nshape: image_folder\nlocation: imgs\npriority: 3\n")
    write(tmp_path, "bad_shape.yaml", "name: bad1\nshape: zipfile\nlocation: x\n")
    write(tmp_path, "bad_field.yaml", "name: bad2\nshape: parquet\nlocation: x.parquet\nfields: {key: id}\n")
    write(tmp_path, "bad_yaml.yaml", "name: [unclosed\n")
    write(tmp_path, "bad_name.yaml", "name: Has Spaces\nshape: image_folder\nlocation: x\n")
    write(tmp_path, "typo.yaml", "name: typo\nshape: image_folder\nlocaton: x\n")
    reg = load_registry(tmp_path)
    assert list(reg.sources) == ["good"]
    assert reg.get("good").spec.priority == 3
    errors = {e.path.name: e.message for e in reg.errors}
    assert set(errors) == {"bad_shape.yaml", "bad_field.yaml", "bad_yaml.yaml", "bad_name.yaml", "typo.yaml"}
    assert "field 'shape'" in errors["bad_shape.yaml"]
    assert "fields.image is required" in errors["bad_field.yaml"]
    assert "not valid YAML" in errors["bad_yaml.yaml"]
    assert "field 'name'" in errors["bad_name.yaml"]
    assert "field 'locaton'" in errors["typo.yaml"] and "field 'location'" in errors["typo.yaml"]


def test_duplicate_names_keep_the_first_and_report_the_second(tmp_path):
    write(tmp_path, "a.yaml", "name: same\nshape: image_folder\nlocation: a\n")
    write(tmp_path, "b.yaml", "name: same\nshape: image_folder\nlocation: b\n")
    reg = load_registry(tmp_path)
    assert reg.get("same").path.name == "a.yaml"
    assert "already defined" in reg.errors[0].message


def test_fingerprint_changes_with_the_spec(tmp_path):
    path = write(tmp_path, "a.yaml", "name: a\nshape: image_folder\nlocation: a\n")
    before = load_registry(tmp_path).get("a").fingerprint
    assert load_registry(tmp_path).get("a").fingerprint == before
    path.write_text("name: a\nshape: image_folder\nlocation: a\npriority: 1\n")
    assert load_registry(tmp_path).get("a").fingerprint != before


def test_object_store_locations_profiles_and_their_mistakes(tmp_path):
    write(tmp_path, "s3.yaml", "name: s3src\nshape: webdataset\nlocation: s3://bucket/shards/**/*.tar\n")
    write(tmp_path, "gs.yaml", "name: gssrc\nshape: image_folder\nlocation: gs://bucket/photos/\n")
    write(
        tmp_path,
        "profile.yaml",
        "name: prof\nshape: image_folder\nlocation: s3://bucket/p\nstorage: {endpoint_env: MY_EP, secret_access_key_env: MY_SECRET, region: eu-west-1}\n",
    )
    write(tmp_path, "http.yaml", "name: http\nshape: image_folder\nlocation: https://example.com/photos\n")
    write(tmp_path, "mixed_root.yaml", "name: mixed\nshape: image_folder\nlocation: s3://bucket/p\nroot: ../local\n")
    write(tmp_path, "local_profile.yaml", "name: lp\nshape: image_folder\nlocation: photos\nstorage: {endpoint_env: MY_EP}\n")
    write(tmp_path, "literal.yaml", "name: lit\nshape: image_folder\nlocation: s3://b/p\nstorage: {aws_secret_access_key: abc123}\n")
    write(
        tmp_path,
        "pasted.yaml",
        "name: pasted\nshape: image_folder\nlocation: s3://b/p\nstorage: {secret_access_key_env: 'wJalr/XUtn+FEMI'}\n",
    )
    reg = load_registry(tmp_path)
    assert sorted(reg.sources) == ["gssrc", "prof", "s3src"]
    assert reg.get("s3src").resolve_location() == "s3://bucket/shards/**/*.tar"
    assert reg.get("gssrc").resolve_location() == "gs://bucket/photos" and reg.get("gssrc").remote
    profile = reg.get("prof").spec.storage
    assert profile is not None and profile.variables() == ["MY_EP", "MY_SECRET"]
    errors = {e.path.name: e.message for e in reg.errors}
    assert "only s3://, gs:// object stores" in errors["http.yaml"]
    assert "both be local paths or both object-store URIs" in errors["mixed_root.yaml"]
    assert "storage is only for object-store locations" in errors["local_profile.yaml"]
    assert "secrets never go in a spec" in errors["literal.yaml"] and "abc123" not in errors["literal.yaml"]
    assert "name of an environment variable" in errors["pasted.yaml"] and "wJalr" not in errors["pasted.yaml"]
