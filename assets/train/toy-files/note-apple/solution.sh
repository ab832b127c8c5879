#!/bin/bash
echo apple > /app/note.txt
