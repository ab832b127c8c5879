from pathlib import Path


def test_file_exists():
    assert Path('/app/note.txt').is_file()


def test_content():
    assert Path('/app/note.txt').read_text().strip() == 'stone'
