#!/bin/bash
echo cloud > /app/note.txt
