#!/bin/bash
echo river > /app/note.txt
