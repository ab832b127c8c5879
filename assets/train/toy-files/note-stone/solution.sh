#!/bin/bash
echo stone > /app/note.txt
