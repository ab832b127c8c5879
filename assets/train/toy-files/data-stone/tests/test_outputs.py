from pathlib import Path


def test_file_exists():
    assert Path('/app/data.txt').is_file()


def test_content():
    assert Path('/app/data.txt').read_text().strip() == 'stone'
