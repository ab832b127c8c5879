#!/usr/bin/env python3
"""Writes the toy training task set `assets/train/toy-files/` and its warm-start
demonstrations: 8 TB1 tasks "create /app/F containing the word W" (F in note.txt,
data.txt; W in apple, river, stone, cloud), each verified by two pytest tests in the
container (the file exists; it holds the word), and `demos.jsonl`, two right and two
wrong demonstrations per task (a wrong one writes the file in /tmp, the other creates it
empty), so that a policy fine-tuned on them succeeds on about half of its rollouts.

Run from the repository root: python3 scripts/make-toy-tasks.py
"""
import json
import os
import shutil

ROOT = os.path.join("assets", "train", "toy-files")
SYSTEM = (
    "You work in a Linux container; the working directory is /app. Act with tool calls.\n"
    "Run a shell command:\n<bash>\ncmd: COMMAND\n</bash>\n"
    "When the task is done:\n<finish>\nmessage: SUMMARY\n</finish>"
)
FILES = ["note.txt", "data.txt"]
WORDS = ["apple", "river", "stone", "cloud"]


def reply(command):
    return f"<bash>\ncmd: {command}\n</bash>\n<finish>\nmessage: done\n</finish>"


def main():
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    demos = []
    for fi, file in enumerate(FILES):
        for wi, word in enumerate(WORDS):
            name = f"{file.split('.')[0]}-{word}"
            d = os.path.join(ROOT, name)
            os.makedirs(os.path.join(d, "tests"))
            instruction = f"Create /app/{file} containing the word {word}."
            with open(os.path.join(d, "task.yaml"), "w") as f:
                f.write(
                    f"instruction: {instruction}\n"
                    "difficulty: easy\ncategory: toy-training\n"
                    "max_agent_timeout_sec: 60\nmax_test_timeout_sec: 30\n"
                )
            with open(os.path.join(d, "Dockerfile"), "w") as f:
                f.write("FROM agent-base:bookworm\nWORKDIR /app\n")
            with open(os.path.join(d, "run-tests.sh"), "w") as f:
                f.write("#!/bin/bash\npython3 -m pytest $TEST_DIR/test_outputs.py -rA\n")
            with open(os.path.join(d, "solution.sh"), "w") as f:
                f.write(f"#!/bin/bash\necho {word} > /app/{file}\n")
            with open(os.path.join(d, "tests", "test_outputs.py"), "w") as f:
                f.write(
                    "from pathlib import Path\n\n\n"
                    "def test_file_exists():\n"
                    f"    assert Path('/app/{file}').is_file()\n\n\n"
                    "def test_content():\n"
                    f"    assert Path('/app/{file}').read_text().strip() == '{word}'\n"
                )
            right = f"echo {word} > {file}"
            # The mistakes are the same for every task (the wrong folder; an empty
            # file, which passes one test of two), so that what RL has to learn is
            # one habit, while the word and file are copied from the instruction.
            wrong = [f"echo {word} > /tmp/{file}", f"touch {file}"]
            for command in [right, right] + wrong:
                demos.append({
                    "task": name,
                    "right": command == right,
                    "messages": [
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": instruction},
                        {"role": "assistant", "content": reply(command)},
                    ],
                })
    with open(os.path.join(ROOT, "demos.jsonl"), "w") as f:
        for d in demos:
            f.write(json.dumps(d) + "\n")
    with open(os.path.join(ROOT, "system_prompt.txt"), "w") as f:
        f.write(SYSTEM)
    print(f"wrote {len(FILES) * len(WORDS)} tasks and {len(demos)} demonstrations into {ROOT}")


if __name__ == "__main__":
    main()
